// What one simulated run is: the fleet (learners, shards, fragments, links), the failure process
// and the mode that decides how rounds form. The defaults are benchmarks/fleet/goodput.py's
// (tiny model, step 50 ms, H = 20, 8 fragments on 2 shards, recovery 5 s, detection 2 s, a 30 s
// window), so that a simulated row and a measured one describe the same fleet.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "server/round_policy.h"

namespace diloco::sim {

// async: rounds as shipped (quorum 1, adaptive grace window, grace cap 5 s, worker timeout
// 10 s), learners stream their fragments and never wait;
// rigid: synchronous DiLoCo that needs every worker (lockstep learners pushing every fragment
// at once, quorum N, no timeout): a failed learner stalls the fleet until it is back and pushed;
// elastic: the same learners, a round closes once every live learner pushed and a learner
// silent for detect_s is no longer live (torchft-like).
enum class Mode { kAsync, kRigid, kElastic };
const char* ModeName(Mode m);
absl::StatusOr<Mode> ParseMode(const std::string& s);

struct FleetConfig {
  Mode mode = Mode::kAsync;
  uint32_t learners = 8;
  uint32_t shards = 2;     // fragment p lives on shard p % shards
  uint32_t fragments = 8;  // P
  uint32_t inner_steps = 20;
  double step_time_s = 0.05;
  double jitter = 0;  // each learner's step time is fixed, uniform in step_time x [1-j, 1+j]
  uint64_t tokens_per_step = 512;

  // Failures: each learner fails after an exponential time of mean mttf_s (infinity: never),
  // is down recovery_s, is restarted, and is back (joined, training) rejoin_s plus the pull of
  // the whole model later. The next time to failure is drawn from the restart, as goodput.py
  // does. Failures happen inside the window only.
  double mttf_s = std::numeric_limits<double>::infinity();
  double recovery_s = 5;
  double rejoin_s = 0;
  // Explicit failure times (seconds after the window opens) per learner; when not empty they
  // replace the seeded process (benchmarks/sim/validate.py replays goodput.py's schedules).
  std::vector<std::vector<double>> schedule;

  double detect_s = 2;          // elastic: the shards' worker timeout
  double async_timeout_s = 10;  // async: the shipped worker timeout
  double heartbeat_s = 0.5;     // a dead learner was last seen up to one heartbeat before it died

  // Links: each learner's own, both ways. Bytes per parameter per push (int8: 1.02) and per
  // update; bandwidth 0 = unlimited. A shard takes pushes in turn at shard_ingress_Bps (0:
  // unlimited).
  uint64_t parameters = 120'000;
  double push_bytes_per_param = 1.02;
  double update_bytes_per_param = 1.02;
  double latency_s = 0;
  double bandwidth_Bps = 0;
  double shard_ingress_Bps = 0;

  double warmup_s = 1;  // before the window opens (no failures)
  double window_s = 30;
  uint64_t seed = 1;

  server::WeightScheme weights = server::WeightScheme::kTokensSqOverSteps;
  double staleness_alpha = 0;
  double async_grace_cap_s = 5;
  double sync_grace_cap_s = 600;  // goodput.py's "unbounded"
};

// The shard's round policy and worker timeout of a mode.
server::RoundPolicy PolicyOf(const FleetConfig& c);
double WorkerTimeoutOf(const FleetConfig& c);  // seconds; infinity: never
// Learners push their fragments staggered over the H steps (async) or all at once and wait for
// the round's answer (rigid, elastic: goodput.py's --lockstep --stream=false).
bool Lockstep(const FleetConfig& c);

}  // namespace diloco::sim
