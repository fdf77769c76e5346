// The pure round rules: grace window formula, close conditions, weights.
#include "server/round_policy.h"

#include <gtest/gtest.h>

namespace diloco::server {
namespace {

TEST(RoundPolicyTest, GraceWindowFollowsTheFormulaAndIsClamped) {
  RoundPolicy p;
  p.gamma = 0.5;
  p.grace_cap = absl::Seconds(5);
  p.min_grace = absl::ZeroDuration();
  RoundTimings t{.step_time_s = 0.1, .inner_steps = 50, .time_to_quorum_s = 1, .sync_time_s = 0.5};
  EXPECT_EQ(GraceWindow(p, t), absl::Seconds(0.5 * (5.0 - 1.0 - 0.5)));
  t.inner_steps = 500;
  EXPECT_EQ(GraceWindow(p, t), absl::Seconds(5));  // cap
  t.inner_steps = 1;
  EXPECT_EQ(GraceWindow(p, t), absl::ZeroDuration());  // negative -> 0
  t.cycle_s = 3;  // a measured cadence is the cycle, whatever tau*t_step says
  EXPECT_EQ(GraceWindow(p, t), absl::Seconds(0.5 * (3.0 - 1.0 - 0.5)));
}

TEST(RoundPolicyTest, CloseConditions) {
  RoundPolicy p;
  p.quorum = 2;
  p.grace_cap = absl::Seconds(10);
  const absl::Time t0 = absl::UnixEpoch();
  OpenRound r{.pushes = 1, .live_workers_missing = 1, .opened = t0};
  EXPECT_FALSE(ShouldClose(p, absl::Seconds(1), r, t0 + absl::Seconds(9)));
  EXPECT_TRUE(ShouldClose(p, absl::Seconds(1), r, t0 + absl::Seconds(10)));  // cap
  // Below quorum with every live worker in: the quorum is the fleet (a worker not heard from
  // yet, or silent, is waited for until the cap) unless it is elastic.
  r.live_workers_missing = 0;
  EXPECT_FALSE(ShouldClose(p, absl::Seconds(1), r, t0 + absl::Seconds(9)));
  EXPECT_EQ(CloseDeadline(p, absl::Seconds(1), r), t0 + absl::Seconds(10));
  p.elastic = true;
  EXPECT_TRUE(ShouldClose(p, absl::Seconds(1), r, t0));
  r.live_workers_missing = 1;
  EXPECT_FALSE(ShouldClose(p, absl::Seconds(1), r, t0));
  p.elastic = false;
  r = {.pushes = 2, .live_workers_missing = 1, .opened = t0, .quorum_reached = t0};
  EXPECT_FALSE(ShouldClose(p, absl::Seconds(1), r, t0 + absl::Milliseconds(999)));
  EXPECT_TRUE(ShouldClose(p, absl::Seconds(1), r, t0 + absl::Seconds(1)));
  EXPECT_EQ(CloseDeadline(p, absl::Seconds(1), r), t0 + absl::Seconds(1));
  EXPECT_FALSE(ShouldClose(p, absl::Seconds(1), OpenRound{}, t0 + absl::Hours(1)));
}

// QuorumAfterLeaves(quorum, known workers, workers that left).
TEST(RoundPolicyTest, TheQuorumDropsWithTheFleetThatLeaves) {
  EXPECT_EQ(QuorumAfterLeaves(2, 2, 0), 2u);
  EXPECT_EQ(QuorumAfterLeaves(2, 2, 1), 1u);  // synchronous pair, one done
  EXPECT_EQ(QuorumAfterLeaves(2, 2, 2), 1u);  // never below 1
  EXPECT_EQ(QuorumAfterLeaves(4, 4, 1), 3u);
  EXPECT_EQ(QuorumAfterLeaves(2, 3, 1), 2u);  // two stay: a quorum of 2 still holds
  EXPECT_EQ(QuorumAfterLeaves(2, 3, 2), 1u);
  EXPECT_EQ(QuorumAfterLeaves(3, 2, 1), 2u);  // one not seen yet still counts
  EXPECT_EQ(QuorumAfterLeaves(1, 5, 4), 1u);
}

TEST(RoundPolicyTest, Weights) {
  EXPECT_DOUBLE_EQ(PushWeight(WeightScheme::kTokensSqOverSteps, 100, 4, 0, 0), 2500.0);
  EXPECT_DOUBLE_EQ(PushWeight(WeightScheme::kTokens, 100, 4, 0, 0), 100.0);
  EXPECT_DOUBLE_EQ(PushWeight(WeightScheme::kUniform, 100, 4, 0, 0), 1.0);
  EXPECT_DOUBLE_EQ(PushWeight(WeightScheme::kUniform, 100, 4, 3, 0.5), 0.5);  // (1+3)^-0.5
  EXPECT_FALSE(ParseWeightScheme("bogus").ok());
}

}  // namespace
}  // namespace diloco::server
