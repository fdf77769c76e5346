// When a fragment's open round closes, and how much each push weighs in it (docs/architecture.md,
// "A round, end to end"). Pure functions of the round's state and the time: the shard calls
// them, tests drive them with a fake clock.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace diloco::server {

enum class WeightScheme { kTokensSqOverSteps, kTokens, kUniform };
absl::StatusOr<WeightScheme> ParseWeightScheme(const std::string& s);

// w = tokens^2/steps (Decoupled DiLoCo's quantity x quality), tokens, or 1; times the optional
// staleness discount (1+s)^-alpha (alpha = 0: off).
double PushWeight(WeightScheme scheme, uint64_t tokens, uint32_t steps, uint64_t staleness,
                  double staleness_alpha);

struct RoundPolicy {
  uint32_t quorum = 1;  // K: pushes needed before closing (or the cap)
  // Elastic: a round short of K also closes once every live worker has pushed, so the quorum
  // re-forms around the workers heard from within the worker timeout (torchft-like). Off, K is
  // the fleet: a worker the shard has not heard from yet (one starting late) or that went silent
  // (stalled, or failed and coming back) is waited for until the cap; closing without it let the
  // others run rounds ahead of it, and lockstep learners with streamed fragments then waited on
  // each other's rounds until the cap, round after round.
  bool elastic = false;
  absl::Duration grace_cap = absl::Seconds(5);  // no round waits longer than this
  double gamma = 1.0;                           // grace = gamma*(cycle - t_q - t_sync)
  absl::Duration min_grace = absl::Milliseconds(20);
};

// The quorum once `left` workers have said Leave (docs/protocol.md, "Leaving"), of `known`
// workers the shard knows: at most the fleet that stays, min(quorum, F - left) with F the larger
// of the quorum and `known`, and at least 1. A fleet whose quorum is its size (synchronous
// DiLoCo) stops waiting for a worker that is done, and one whose quorum is below its size keeps
// it while enough workers stay; a worker that has not said Hello yet still counts (F >= quorum).
uint32_t QuorumAfterLeaves(uint32_t quorum, uint32_t known, uint32_t left);

// Moving averages the adaptive grace window is computed from.
struct RoundTimings {
  double step_time_s = 0;  // fleet's mean inner step time
  double inner_steps = 0;  // tau: mean inner steps between a worker's pushes
  // The fleet's push cadence: the time between two pushes of a worker, as measured (the lower
  // median over the live workers); 0 while unknown. It is the cycle when known: tau*t_step
  // underestimates it when workers push unequal step counts (DyLU: the slow workers' few, slow
  // steps take as long as the fast ones' H steps, and the mean of the counts times the fastest
  // step time falls short of both).
  double cycle_s = 0;
  double time_to_quorum_s = 0;
  double sync_time_s = 0;  // push-to-adopt time seen by workers
};

// clamp(gamma * (cycle - t_quorum - t_sync), min_grace, cap), cycle = cycle_s when known, else
// tau*t_step.
absl::Duration GraceWindow(const RoundPolicy& p, const RoundTimings& t);

struct OpenRound {
  uint32_t pushes = 0;
  uint32_t live_workers_missing = 0;  // live workers that have not pushed into this round
  absl::Time opened;                  // first push
  absl::Time quorum_reached;          // K-th push (valid when pushes >= quorum)
};

// True when the round should close now: quorum in and (grace passed or nobody live is
// missing), or (elastic) short of the quorum with nobody live missing, or the cap since the
// first push has passed.
bool ShouldClose(const RoundPolicy& p, absl::Duration grace, const OpenRound& r, absl::Time now);
// When ShouldClose will next become true without new events (for the poll timeout).
absl::Time CloseDeadline(const RoundPolicy& p, absl::Duration grace, const OpenRound& r);

}  // namespace diloco::server
