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

// The quick form: a few small runs whose output is checked (no-failure goodput 1 in every mode,
// async >= elastic >= rigid under failures, a run repeated gives the same line, a 10,000-learner
// run completes with goodput in [0, 1]). Prints each run's line and what failed; true when
// nothing did. Speed is never checked.
bool QuickCheck();

}  // namespace diloco::sim
