// The configurations the sweep command runs, and the quick form's self-check.
//   fleet: N = 8, 16, 32 at 0, 0.1, 0.3, 1, 3 fleet failures per round, every mode, with
//          benchmarks/fleet/goodput.py's settings (to set beside its measured rows);
//   scale: N = 1e3 .. 1e6 learners, each a failure unit with a per-learner mean time to failure
//          of 1 year and 0.1 year (benchmarks/sim/RESULTS.md, "The paper's
//          rates", says where the year comes from), step 1 s, H = 100, recovery 10 min,
//          synchronous rounds without a grace cap (they wait for every member);
//   recovery: the scale sweep's fleet at N = 1,000 and 1 or 3 fleet failures per round, the
//          recovery time from 1 to 32 rounds: what bounds async over synchronous (a rigid
//          fleet stalls for a failed member's recovery; async learners lose only their own).
//   paper: the goodput headline in one setting, each figure's source in
//          benchmarks/sim/RESULTS.md ("The headline in one setting"): 1.5 M chips failing once a
//          year each, grouped in learners of 2,048 chips (732 learners; 4,096 as a variant),
//          torchft's 948 s from fault to recovery, rounds of 30 s (100 s as a variant),
//          synchronous rounds without a grace cap.
#pragma once

#include <string>
#include <vector>

#include "benchmarks/sim/fleet_config.h"

namespace diloco::sim {

// goodput.py's rate: fleet failures per round; M = N x round / rate (rate 0: no failures).
double MttfForRate(const FleetConfig& c, double rate);

std::vector<FleetConfig> FleetSweep();
std::vector<FleetConfig> ScaleSweep();
std::vector<FleetConfig> RecoverySweep();
std::vector<FleetConfig> PaperSweep();  // its first three runs (async, rigid, elastic): the row

// The paper sweep's figures (where each comes from: benchmarks/sim/RESULTS.md).
inline constexpr uint32_t kPaperChips = 1'500'000;
inline constexpr double kChipMttfYears = 1;
inline constexpr double kTorchftRecoveryS = 948;

// The quick form: a few small runs whose output is checked (no-failure goodput 1 in every mode,
// async >= elastic >= rigid under failures, a run repeated gives the same line, a 10,000-learner
// run completes with goodput in [0, 1]). Prints each run's line and what failed; true when
// nothing did. Speed is never checked.
bool QuickCheck();

}  // namespace diloco::sim
