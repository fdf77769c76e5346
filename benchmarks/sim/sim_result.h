// What one simulated run measured, and its JSON line. Goodput is goodput.py's: useful
// learner-steps in the window (a killed incarnation's steps whose push reached a shard, every
// window step of a learner still up at the end) over learners x window x the no-failure step
// rate (the mean of the learners' own rates).
#pragma once

#include <cstdint>
#include <string>

#include "benchmarks/sim/fleet_config.h"

namespace diloco::sim {

struct SimResult {
  Mode mode = Mode::kAsync;
  uint32_t learners = 0;
  double mttf_s = 0;
  double recovery_s = 0;
  double round_s = 0;  // H x step time
  double window_s = 0;
  double goodput = 0;
  // Tokens that reached the global model (pushes admitted by a shard in the window) per second,
  // over learners x the no-failure step rate x tokens per step.
  double tokens_rel = 0;
  // Pushes sent in the window, and those lost (their learner died before the shard had them).
  uint64_t pushes = 0;
  uint64_t lost_pushes = 0;
  double rounds = 0;  // rounds closed in the window per fragment
  // Mean over rounds of the merged weight (server::PushWeight) over a full round's (the
  // round's pushes plus every live learner missing from it at the mean push weight).
  double round_share = 0;
  uint64_t failures = 0;          // in the window
  uint64_t events = 0;            // handled, all of the run
  double failures_per_round = 0;  // fleet-wide, measured: failures x round_s / window

  std::string JsonLine(const FleetConfig& c) const;
};

}  // namespace diloco::sim
