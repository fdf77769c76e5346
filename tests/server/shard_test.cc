// Round semantics of one shard, transport-free, with a fake clock: Nesterov per round against
// hand-computed values, merge weights, quorum and grace, exactly-once, staleness, refusals that
// change no state, and recovery from the store.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>

#include "common/faults.h"
#include "tests/server/shard_harness.h"
#include "tests/util/temp_dir.h"

namespace diloco::server::testing {
namespace {

using wire::AckStatus;
using wire::ErrorCode;
using wire::MsgType;

std::vector<float> Filled(size_t n, float v) { return std::vector<float>(n, v); }

class ShardTest : public ::testing::Test {
 protected:
  void SetUpShard(ShardOptions o) {
    h_ = std::make_unique<ShardHarness>(std::move(o));
    n0_ = h_->fragment(0).numel;
    h_->Hello("a", 1);
    h_->Hello("b", 2);
    auto init = h_->Init("a", 1, 0, Filled(n0_, 1.0f));
    const Outgoing* ack = Only(init, MsgType::PushAck);
    ASSERT_NE(ack, nullptr);
    ASSERT_EQ(ack->header.ack, AckStatus::Initialized);
    ASSERT_EQ(h_->shard().published_version(0), 1u);
  }
  std::unique_ptr<ShardHarness> h_;
  uint64_t n0_ = 0;
};

TEST_F(ShardTest, OneNesterovStepPerRoundOnTheWeightedMean) {
  auto o = TinyOptions();
  o.round.quorum = 2;
  SetUpShard(o);
  // Equal tokens and steps: the merge is the plain mean (0.1 + 0.3) / 2 = 0.2.
  auto r1 = h_->Push("a", 1, 0, 1, 1, Filled(n0_, 0.1f));
  EXPECT_EQ(Only(r1, MsgType::PushAck)->header.ack, AckStatus::Queued);
  EXPECT_TRUE(h_->Tick().empty());  // quorum not in, worker 2 is live: wait
  h_->Push("b", 2, 0, 1, 1, Filled(n0_, 0.3f));
  auto out = h_->Tick();  // every live worker pushed: closes now
  ASSERT_EQ(out.size(), 2u);
  for (const auto& u : out) {
    EXPECT_EQ(u.header.type, MsgType::FragmentUpdate);
    EXPECT_EQ(u.header.ack, AckStatus::Applied);
    EXPECT_EQ(u.header.version, 2u);
  }
  // m = 0.2; theta = 1 - 0.7 * (0.2 + 0.9 * 0.2) = 1 - 0.266 = 0.734
  for (float v : h_->shard().params(0)) EXPECT_NEAR(v, 0.734f, 1e-6);
  // Second round, d = 0.2 again: m = 0.9*0.2 + 0.2 = 0.38; theta -= 0.7*(0.2 + 0.342) = 0.3794
  h_->Push("a", 1, 0, 2, 2, Filled(n0_, 0.2f));
  h_->Push("b", 2, 0, 2, 2, Filled(n0_, 0.2f));
  h_->Tick();
  for (float v : h_->shard().params(0)) EXPECT_NEAR(v, 0.734f - 0.3794f, 1e-6);
  EXPECT_EQ(h_->shard().counters().rounds, 2u);
}

TEST_F(ShardTest, TokensSquaredOverStepsWeights) {
  auto o = TinyOptions();
  o.round.quorum = 2;
  SetUpShard(o);
  // w1 = 100^2/10 = 1000, w2 = 200^2/10 = 4000: d = (1000*1 + 4000*0) / 5000 = 0.2
  h_->Push("a", 1, 0, 1, 1, Filled(n0_, 1.0f), 100, 10);
  h_->Push("b", 2, 0, 1, 1, Filled(n0_, 0.0f), 200, 10);
  h_->Tick();
  for (float v : h_->shard().params(0)) EXPECT_NEAR(v, 1.0f - 0.7f * 1.9f * 0.2f, 1e-6);
}

TEST_F(ShardTest, UniformWeightsIgnoreTokens) {
  auto o = TinyOptions();
  o.round.quorum = 2;
  o.weights = WeightScheme::kUniform;
  SetUpShard(o);
  h_->Push("a", 1, 0, 1, 1, Filled(n0_, 1.0f), 100, 10);
  h_->Push("b", 2, 0, 1, 1, Filled(n0_, 0.0f), 200, 10);
  h_->Tick();
  for (float v : h_->shard().params(0)) EXPECT_NEAR(v, 1.0f - 0.7f * 1.9f * 0.5f, 1e-6);
}

TEST_F(ShardTest, GraceCapClosesARoundAFrozenWorkerHolds) {
  auto o = TinyOptions();
  o.round.quorum = 2;
  o.round.grace_cap = absl::Seconds(3);
  SetUpShard(o);
  h_->Push("a", 1, 0, 1, 1, Filled(n0_, 0.1f));
  h_->clock().Advance(absl::Seconds(2));
  EXPECT_TRUE(h_->Tick().empty());  // worker 2 is live but silent: wait, within the cap
  h_->clock().Advance(absl::Seconds(1));
  auto out = h_->Tick();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].routing_id, "a");
  EXPECT_EQ(out[0].header.version, 2u);
}

TEST_F(ShardTest, DeadWorkerDoesNotCountAsLive) {
  auto o = TinyOptions();
  o.round.quorum = 2;
  o.round.elastic = true;  // the quorum re-forms around the live workers
  o.worker_timeout = absl::Seconds(2);
  SetUpShard(o);
  h_->clock().Advance(absl::Seconds(3));  // worker 2 silent past the timeout: dead
  h_->Push("a", 1, 0, 1, 1, Filled(n0_, 0.1f));
  EXPECT_EQ(h_->Tick().size(), 1u);  // nobody live is missing: closes at once
}

// Not elastic, the quorum is the fleet: a round short of it waits until the grace cap for a
// worker gone silent (stalled, or failed and coming back) and for one the shard has not heard
// from yet (started late). Closing without them let the others run rounds ahead, and lockstep
// learners with streamed fragments then waited on each other's rounds until the cap, round
// after round (the convergence study's synchronous arm once ran past CI's time so).
TEST_F(ShardTest, AFleetQuorumWaitsForSilentAndUnseenWorkersUntilTheCap) {
  auto o = TinyOptions();
  o.round.quorum = 3;  // workers 1 and 2 said Hello, worker 3 never has
  o.round.grace_cap = absl::Seconds(30);
  o.worker_timeout = absl::Seconds(2);
  SetUpShard(o);
  h_->clock().Advance(absl::Seconds(3));  // worker 2 silent past the timeout
  h_->Push("a", 1, 0, 1, 1, Filled(n0_, 0.1f));
  EXPECT_TRUE(h_->Tick().empty());
  h_->clock().Advance(absl::Seconds(20));
  EXPECT_TRUE(h_->Tick().empty());
  h_->Push("b", 2, 0, 1, 1, Filled(n0_, 0.3f));  // worker 2 back; worker 3 still unseen
  EXPECT_TRUE(h_->Tick().empty());
  h_->clock().Advance(absl::Seconds(9));  // 29 s since the first push
  EXPECT_TRUE(h_->Tick().empty());
  h_->clock().Advance(absl::Seconds(1));
  auto out = h_->Tick();  // the cap: closes with the two
  ASSERT_EQ(out.size(), 2u);
  for (const auto& u : out) EXPECT_EQ(u.header.version, 2u);
}

TEST_F(ShardTest, QuorumThenGraceWindow) {
  auto o = TinyOptions();
  o.round.quorum = 1;
  o.round.min_grace = absl::Milliseconds(500);
  SetUpShard(o);
  h_->Push("a", 1, 0, 1, 1, Filled(n0_, 0.1f));
  EXPECT_TRUE(h_->Tick().empty());  // quorum in, worker 2 live: grace window
  h_->clock().Advance(absl::Milliseconds(499));
  EXPECT_TRUE(h_->Tick().empty());
  h_->clock().Advance(absl::Milliseconds(1));
  EXPECT_EQ(h_->Tick().size(), 1u);
}

// A full round (both live workers), then a round only worker 1 makes: with the default norm the
// absent worker 2 counts as a zero delta of its usual weight, so d = 0.2 / 2; with kArrived the
// lone push carries the whole step.
double ThetaAfterALoneRound(RoundNorm norm, absl::Duration absent_for, absl::Duration timeout,
                            RoundStep step = RoundStep::kPartial) {
  auto o = TinyOptions();
  o.norm = norm;
  o.step = step;
  o.worker_timeout = timeout;
  ShardHarness h(o);
  const uint64_t n = h.fragment(0).numel;
  h.Hello("a", 1);
  h.Hello("b", 2);
  h.Init("a", 1, 0, Filled(n, 1.0f));
  h.Push("a", 1, 0, 1, 1, Filled(n, 0.2f));
  h.Push("b", 2, 0, 1, 1, Filled(n, 0.2f));
  EXPECT_EQ(h.Tick().size(), 2u);  // nobody live missing: closes at once
  h.clock().Advance(absent_for);
  h.Push("a", 1, 0, 2, 2, Filled(n, 0.2f));
  h.clock().Advance(o.round.grace_cap);
  EXPECT_EQ(h.Tick().size(), 1u);
  EXPECT_EQ(h.shard().published_version(0), 3u);
  return h.shard().params(0)[0];
}

TEST(ShardRoundNormTest, AnAbsentLiveWorkerCountsAsAZeroDelta) {
  // Round 1: d = 0.2, m = 0.2, theta = 1 - 0.7 * 0.38 = 0.734.
  // Round 2, expected: share 1/2, d = 0.1, and half a momentum step (kernels/outer.h):
  // m = (1 - 0.5 * 0.1) * 0.2 + 0.1 = 0.29, theta = 0.734 - 0.7 * (0.1 + 0.45 * 0.29) = 0.57265.
  EXPECT_NEAR(ThetaAfterALoneRound(RoundNorm::kExpected, absl::ZeroDuration(), absl::Seconds(10)),
              0.57265, 1e-6);
  // The same with whole momentum steps: m = 0.28, theta = 0.734 - 0.7 * (0.1 + 0.252) = 0.4876.
  EXPECT_NEAR(ThetaAfterALoneRound(RoundNorm::kExpected, absl::ZeroDuration(), absl::Seconds(10),
                                   RoundStep::kFull),
              0.4876, 1e-6);
  // Composed (phase 0 -> 0.5): p = 0.9 * 0.2 + 0.1 = 0.28, theta = 0.734 - 0.7 * (0.1 + 0.9 *
  // 0.5 * 0.28) = 0.5758.
  EXPECT_NEAR(ThetaAfterALoneRound(RoundNorm::kExpected, absl::ZeroDuration(), absl::Seconds(10),
                                   RoundStep::kComposed),
              0.5758, 1e-6);
  // Round 2, arrived: d = 0.2, m = 0.38, theta = 0.734 - 0.7 * (0.2 + 0.342) = 0.3546.
  EXPECT_NEAR(ThetaAfterALoneRound(RoundNorm::kArrived, absl::ZeroDuration(), absl::Seconds(10)),
              0.3546, 1e-6);
}

TEST(ShardRoundNormTest, ADeadWorkerIsNotExpected) {
  // Worker 2 silent past the worker timeout: the fleet is worker 1 alone, a full step.
  EXPECT_NEAR(ThetaAfterALoneRound(RoundNorm::kExpected, absl::Seconds(3), absl::Seconds(2)),
              0.3546, 1e-6);
}

// Two workers, "a" (1) and "b" (2), that stay live however long the test's clock runs, with
// fragment 0 at 1.0 everywhere; outer lr 1 and no momentum, so theta moves by exactly a
// round's normalised delta. Returns fragment 0's size.
ShardOptions TwoWorkerOptions() {
  auto o = TinyOptions();
  o.outer.lr = 1.0f;
  o.outer.mu = 0.0f;
  o.worker_timeout = absl::Hours(1);
  return o;
}
uint64_t TwoLiveWorkers(ShardHarness& h) {
  const uint64_t n = h.fragment(0).numel;
  h.Hello("a", 1);
  h.Hello("b", 2);
  h.Init("a", 1, 0, Filled(n, 1.0f));
  return n;
}

// A worker that pushes a quarter as often as the fastest (a slow one, without DyLU) is expected
// at a quarter of its weight in the rounds it misses, once its cadence is known. Worker a
// pushes every 10 s, b every 40 s; with outer lr 1 and no momentum theta moves by exactly the
// round's normalised delta.
TEST(ShardRoundNormTest, ASlowWorkerIsExpectedAtItsPushRate) {
  const ShardOptions o = TwoWorkerOptions();
  ShardHarness h(o);
  const uint64_t n = TwoLiveWorkers(h);
  uint64_t seq_a = 0, seq_b = 0;
  // One round of fragment 0, 10 s after the last began; returns how far theta moved.
  auto round = [&](bool with_b) {
    h.clock().Advance(o.round.grace_cap);
    const float before = h.shard().params(0)[0];
    const uint64_t v = h.shard().published_version(0);
    h.Push("a", 1, 0, ++seq_a, v, Filled(n, 0.2f));
    if (with_b) h.Push("b", 2, 0, ++seq_b, v, Filled(n, 0.2f));
    if (!with_b) h.clock().Advance(o.round.grace_cap);  // b is live: the round waits its cap
    h.Tick();
    EXPECT_EQ(h.shard().published_version(0), v + 1);
    if (with_b) h.clock().Advance(o.round.grace_cap);  // every round takes 10 s
    return before - h.shard().params(0)[0];
  };
  EXPECT_NEAR(round(true), 0.2, 1e-6);   // both: a full round
  EXPECT_NEAR(round(false), 0.1, 1e-6);  // b's cadence unknown: expected at its whole weight
  EXPECT_NEAR(round(false), 0.1, 1e-6);
  EXPECT_NEAR(round(false), 0.1, 1e-6);
  EXPECT_NEAR(round(true), 0.2, 1e-6);          // b again, 40 s after its first push
  EXPECT_NEAR(round(false), 0.2 / 1.25, 1e-6);  // b expected at a quarter: 0.2 * 1 / (1 + 1/4)
}

// Rounds cut finer than the workers' cadence (each round holds half the fleet) still count
// every worker at its whole weight: two workers pushing at the same cadence, alternately.
TEST(ShardRoundNormTest, RoundsCutFinerThanTheCadenceStillExpectEveryWorker) {
  const ShardOptions o = TwoWorkerOptions();
  ShardHarness h(o);
  const uint64_t n = TwoLiveWorkers(h);
  for (uint64_t seq = 1; seq <= 4; ++seq) {
    for (auto [rid, worker] : {std::pair{"a", 1u}, std::pair{"b", 2u}}) {
      const float before = h.shard().params(0)[0];
      const uint64_t v = h.shard().published_version(0);
      h.Push(rid, worker, 0, seq, v, Filled(n, 0.2f));
      h.clock().Advance(o.round.grace_cap);  // the other one is live: the round waits its cap
      h.Tick();
      ASSERT_EQ(h.shard().published_version(0), v + 1);
      if (seq > 1) {  // both cadences known
        EXPECT_NEAR(before - h.shard().params(0)[0], 0.1, 1e-6) << seq;
      }
    }
  }
}

// DyLU: a fast worker pushes 50 steps of 20 ms, a slow one 10 steps of 100 ms, both once a
// second. The grace window is one cadence (1 s, measured), not the mean pushed steps times the
// fastest step time (30 x 20 ms = 0.6 s, which closed the fast worker's rounds before the slow
// one's push came and split every round in two).
TEST(ShardGraceTest, TheWindowIsTheFleetsCadenceWhenWorkersPushUnequalSteps) {
  const ShardOptions o = TwoWorkerOptions();
  ShardHarness h(o);
  const uint64_t n = TwoLiveWorkers(h);
  auto push = [&](const char* rid, uint32_t worker, uint64_t seq, uint32_t steps,
                  uint64_t step_us) {
    auto f = h.PushFields(worker, 0, seq, h.shard().published_version(0), n, 64 * steps, steps);
    f.step_time_us = step_us;
    auto r = h.Send(rid, f, ShardHarness::Encode(wire::kFragmentCodec, Filled(n, 0.1f)));
    ASSERT_EQ(Only(r, MsgType::PushAck)->header.ack, AckStatus::Queued);
  };
  for (uint64_t seq = 1; seq <= 3; ++seq) {  // both push together: the cadences are learnt
    push("a", 1, seq, 50, 20000);
    push("b", 2, seq, 10, 100000);
    h.Tick();
    ASSERT_EQ(h.shard().published_version(0), seq + 1);
    h.clock().Advance(absl::Seconds(1));
  }
  const uint64_t v = h.shard().published_version(0);
  push("a", 1, 4, 50, 20000);
  h.clock().Advance(absl::Milliseconds(800));  // the slow worker is late, within one cadence
  h.Tick();
  EXPECT_EQ(h.shard().published_version(0), v) << "the round closed before one cadence passed";
  push("b", 2, 4, 10, 100000);
  h.Tick();  // every live worker is in: closes
  EXPECT_EQ(h.shard().published_version(0), v + 1);
}

// The faults of --test_drop_pushes and --test_drop_seed.
std::shared_ptr<const TestFaults> DropFaults(double fraction, uint64_t seed) {
  auto f = std::make_shared<TestFaults>();
  f->drop_pushes = fraction;
  f->drop_seed = seed;
  return f;
}

// The study's test flag: a dropped push is answered Applied like any other, but its round
// leaves theta as it was; about the asked fraction is dropped.
TEST(ShardDropTest, DroppedPushesAreAnsweredButNeverMerged) {
  auto o = TinyOptions();
  o.faults = DropFaults(0.5, 0);
  ShardHarness h(o);
  const uint64_t n = h.fragment(0).numel;
  h.Hello("a", 1);
  h.Init("a", 1, 0, Filled(n, 1.0f));
  int unchanged = 0;
  for (uint64_t seq = 1; seq <= 40; ++seq) {
    const float before = h.shard().params(0)[0];
    h.Push("a", 1, 0, seq, seq, Filled(n, 0.01f));
    auto out = h.Tick();  // the only live worker pushed: closes at once
    const Outgoing* u = Only(out, MsgType::FragmentUpdate);
    ASSERT_NE(u, nullptr);
    EXPECT_EQ(u->header.ack, AckStatus::Applied);
    EXPECT_EQ(u->header.version, seq + 1);
    unchanged += h.shard().params(0)[0] == before;
  }
  EXPECT_EQ(static_cast<uint64_t>(unchanged), h.shard().counters().pushes_dropped);
  EXPECT_GE(unchanged, 10);
  EXPECT_LE(unchanged, 30);
}

// Which pushes are dropped is a function of the push (worker, fragment, sequence number), not
// of the order pushes arrive in: two shards that see the same rounds in opposite orders drop the
// same pushes and end with the same bits (worker-order merges), which is what makes a lockstep
// study arm with drops repeat exactly; another seed drops others. A generator drawn per arrival
// fails this.
TEST(ShardDropTest, TheSamePushesAreDroppedWhateverTheirArrivalOrder) {
  auto o = TinyOptions();
  o.faults = DropFaults(0.5, 0);
  o.round.quorum = 2;
  o.merge_order = MergeOrder::kWorker;
  ShardHarness ab(o), ba(o);
  o.faults = DropFaults(0.5, 1);
  ShardHarness other_seed(o);
  const uint64_t n = ab.fragment(0).numel;
  for (ShardHarness* h : {&ab, &ba, &other_seed}) {
    h->Hello("a", 1);
    h->Hello("b", 2);
    h->Init("a", 1, 0, Filled(n, 1.0f));
  }
  int rounds_with_one_dropped = 0;
  for (uint64_t seq = 1; seq <= 24; ++seq) {
    // Worker 1's delta and worker 2's differ, so dropping one leaves a different theta than
    // dropping the other.
    const auto d1 = Filled(n, 0.01f), d2 = Filled(n, -0.03f);
    const uint64_t before = ab.shard().counters().pushes_dropped;
    ab.Push("a", 1, 0, seq, seq, d1);
    ab.Push("b", 2, 0, seq, seq, d2);
    ba.Push("b", 2, 0, seq, seq, d2);
    ba.Push("a", 1, 0, seq, seq, d1);
    other_seed.Push("a", 1, 0, seq, seq, d1);
    other_seed.Push("b", 2, 0, seq, seq, d2);
    other_seed.Tick();
    ab.Tick();
    ba.Tick();
    ASSERT_EQ(ab.shard().published_version(0), seq + 1);
    ASSERT_EQ(ba.shard().published_version(0), seq + 1);
    ASSERT_EQ(ab.shard().counters().pushes_dropped, ba.shard().counters().pushes_dropped)
        << "round " << seq;
    ASSERT_EQ(ab.shard().params(0), ba.shard().params(0)) << "round " << seq;
    rounds_with_one_dropped += ab.shard().counters().pushes_dropped - before == 1;
  }
  // Both drop about half (48 pushes at 0.5), and the test saw rounds where the order could matter.
  EXPECT_GE(ab.shard().counters().pushes_dropped, 12u);
  EXPECT_LE(ab.shard().counters().pushes_dropped, 36u);
  EXPECT_GE(rounds_with_one_dropped, 4);
  // Another --test_drop_seed draws other pushes.
  EXPECT_NE(other_seed.shard().params(0), ab.shard().params(0));
}

TEST_F(ShardTest, DuplicatePushIsAckedNotAppliedTwice) {
  SetUpShard(TinyOptions());
  h_->Hello("b", 2);
  h_->clock().Advance(absl::Seconds(20));  // worker 2 no longer live
  h_->Hello("a", 1);
  h_->Push("a", 1, 0, 1, 1, Filled(n0_, 0.5f));
  // Resent while still in the open round: acked Queued, not added.
  auto again = h_->Push("a", 1, 0, 1, 1, Filled(n0_, 0.5f));
  EXPECT_EQ(Only(again, MsgType::PushAck)->header.ack, AckStatus::Queued);
  ASSERT_EQ(h_->Tick().size(), 1u);
  const auto after_one = h_->shard().params(0);
  EXPECT_NEAR(after_one[0], 1.0f - 0.7f * 1.9f * 0.5f, 1e-6);
  // Resent after its round closed (a lost Applied ack): Duplicate, theta unchanged.
  auto dup = h_->Push("a", 1, 0, 1, 1, Filled(n0_, 0.5f));
  EXPECT_EQ(Only(dup, MsgType::PushAck)->header.ack, AckStatus::Duplicate);
  EXPECT_TRUE(h_->Tick().empty());
  EXPECT_EQ(h_->shard().params(0), after_one);
  EXPECT_EQ(h_->shard().counters().pushes_duplicate, 2u);
}

TEST_F(ShardTest, SupersededGenerationIsRefused) {
  SetUpShard(TinyOptions());
  h_->clock().Advance(absl::Seconds(20));
  h_->Hello("a", 1);
  h_->Push("a", 1, 0, 1, 1, Filled(n0_, 0.5f));
  h_->Tick();
  // The worker restarts as generation 2; a push still claiming generation 1 is refused.
  h_->Send("a2", h_->Base(MsgType::Hello, 1, 2));
  auto r = h_->Push("a2", 1, 0, 1, 2, Filled(n0_, 0.5f));
  // The harness pushes as generation 1: refused as superseded, nothing applied.
  EXPECT_EQ(Only(r, MsgType::Error)->header.error_code, ErrorCode::BadIdentity);
  EXPECT_TRUE(h_->Tick().empty());
}

// A worker gave up on a shard that took long to recover and opened new connections; the Hellos
// it left queued on the closed ones are read late, after the live connection's. They are
// refused and bind nothing: the live connection keeps the worker, and its pull is answered.
TEST_F(ShardTest, AHelloFromAConnectionTheWorkerReplacedBindsNothing) {
  SetUpShard(TinyOptions());  // worker 1 bound on "a", its Hello saying no connection
  auto hello = [&](const std::string& rid, uint32_t connection, uint64_t gen = 1) {
    auto f = h_->Base(MsgType::Hello, 1, gen);
    f.connection = connection;
    return h_->Send(rid, f);
  };
  auto pull = h_->Base(MsgType::Pull, 1);
  pull.fragment_id = 0;
  ASSERT_NE(Only(hello("live", 3), MsgType::Welcome), nullptr);
  const auto stale = hello("closed", 2);
  const Outgoing* e = Only(stale, MsgType::Error);
  ASSERT_NE(e, nullptr) << "a Hello from a replaced connection was welcomed";
  EXPECT_EQ(e->header.error_code, ErrorCode::BadIdentity);
  EXPECT_NE(e->header.message.find("replaced by its connection 3"), std::string::npos)
      << e->header.message;
  EXPECT_EQ(h_->shard().counters().hellos_superseded, 1u);
  EXPECT_NE(Only(h_->Send("live", pull), MsgType::FragmentUpdate), nullptr)
      << "the live connection lost its worker";
  EXPECT_EQ(Only(h_->Send("closed", pull), MsgType::Error)->header.error_code,
            ErrorCode::BadIdentity);
  // The same connection again (a periodic Hello) and a newer one are welcomed; the newer one
  // takes the worker.
  EXPECT_NE(Only(hello("live", 3), MsgType::Welcome), nullptr);
  EXPECT_NE(Only(hello("newer", 4), MsgType::Welcome), nullptr);
  EXPECT_EQ(Only(h_->Send("live", pull), MsgType::Error)->header.error_code,
            ErrorCode::BadIdentity);
  // A restarted worker (a new generation) counts its connections from 1 again.
  EXPECT_NE(Only(hello("restarted", 1, 2), MsgType::Welcome), nullptr);
  // A worker that does not say its connection (0: an older worker) is bound as before.
  EXPECT_NE(Only(h_->Hello("old", 2), MsgType::Welcome), nullptr);
  EXPECT_NE(Only(h_->Hello("old-again", 2), MsgType::Welcome), nullptr);
  EXPECT_EQ(h_->shard().counters().hellos_superseded, 1u) << "a welcomed Hello was counted";
}

// A worker that died with a push waiting in the open round restarts (generation 2, sequence
// numbers from 1 again): its new push joins the round beside the dead process's, is neither
// refused as "a second push" nor taken for a duplicate of the old seq 1, and both are merged.
TEST_F(ShardTest, ARestartedWorkersPushJoinsTheRoundHoldingItsDeadProcesssPush) {
  auto o = TinyOptions();
  o.round.quorum = 3;
  o.round.grace_cap = absl::Seconds(60);
  SetUpShard(o);
  auto old_push = h_->Push("a", 1, 0, 1, 1, Filled(n0_, 0.1f));
  ASSERT_EQ(Only(old_push, MsgType::PushAck)->header.ack, AckStatus::Queued);
  h_->Hello("a2", 1, 2);  // the restarted process
  auto fields = h_->PushFields(1, 0, /*seq=*/1, /*base=*/1, n0_);
  fields.generation = 2;
  auto r = h_->Send("a2", fields, ShardHarness::Encode(wire::kFragmentCodec, Filled(n0_, 0.3f)));
  const Outgoing* ack = Only(r, MsgType::PushAck);
  ASSERT_NE(ack, nullptr) << "the new generation's push was refused";
  EXPECT_EQ(ack->header.ack, AckStatus::Queued);
  EXPECT_EQ(ack->header.generation, 2u);
  EXPECT_EQ(h_->shard().counters().pushes_duplicate, 0u);
  EXPECT_EQ(h_->shard().counters().pushes_queued, 2u);
  // The third push closes the round: all three are merged ((0.1 + 0.3 + 0.2) / 3 = 0.2).
  h_->Push("b", 2, 0, 1, 1, Filled(n0_, 0.2f));
  auto closed = h_->Tick();
  ASSERT_FALSE(closed.empty());
  EXPECT_EQ(h_->shard().published_version(0), 2u);
  bool applied_to_new = false;
  for (const Outgoing& out : closed)
    applied_to_new |= out.routing_id == "a2" && out.header.ack == AckStatus::Applied &&
                      out.header.generation == 2u && out.header.seq == 1u;
  EXPECT_TRUE(applied_to_new) << "the new generation's push was not answered Applied";
  // Its seq 1 is applied now: sent again, it is a Duplicate.
  auto again =
      h_->Send("a2", fields, ShardHarness::Encode(wire::kFragmentCodec, Filled(n0_, 0.3f)));
  EXPECT_EQ(Only(again, MsgType::PushAck)->header.ack, AckStatus::Duplicate);
}

TEST_F(ShardTest, StalePushIsRefusedWithRepull) {
  auto o = TinyOptions();
  o.max_staleness = 1;
  SetUpShard(o);
  h_->clock().Advance(absl::Seconds(20));
  h_->Hello("a", 1);
  for (uint64_t s = 1; s <= 2; ++s) {
    h_->Push("a", 1, 0, s, s, Filled(n0_, 0.01f));
    h_->Tick();
  }
  ASSERT_EQ(h_->shard().published_version(0), 3u);
  const auto before = h_->shard().params(0);
  auto r = h_->Push("a", 1, 0, 3, 1, Filled(n0_, 0.5f));  // staleness 2 > 1
  const Outgoing* ack = Only(r, MsgType::PushAck);
  EXPECT_EQ(ack->header.ack, AckStatus::Stale);
  EXPECT_NE(ack->header.message.find("pull"), std::string::npos);
  EXPECT_TRUE(h_->Tick().empty());
  EXPECT_EQ(h_->shard().params(0), before);
}

TEST_F(ShardTest, RefusalsChangeNoState) {
  SetUpShard(TinyOptions());
  const auto before = h_->shard().params(0);
  // Wrong plan.
  auto bad = h_->Base(MsgType::Push, 1);
  bad.plan_fingerprint ^= 1;
  EXPECT_EQ(Only(h_->Send("a", bad), MsgType::Error)->header.error_code, ErrorCode::WrongPlan);
  // A connection that never said Hello.
  auto r = h_->Push("stranger", 1, 0, 1, 1, Filled(n0_, 0.5f));
  EXPECT_EQ(Only(r, MsgType::Error)->header.error_code, ErrorCode::BadIdentity);
  // Worker 2's connection claiming to be worker 1.
  r = h_->Push("b", 1, 0, 1, 1, Filled(n0_, 0.5f));
  EXPECT_EQ(Only(r, MsgType::Error)->header.error_code, ErrorCode::BadIdentity);
  // A fragment this shard does not own... (fragment 7 does not exist).
  r = h_->Push("a", 1, 7, 1, 1, Filled(n0_, 0.5f));
  EXPECT_EQ(Only(r, MsgType::Error)->header.error_code, ErrorCode::UnknownFragment);
  // Wrong element count.
  r = h_->Push("a", 1, 0, 1, 1, Filled(n0_ - 1, 0.5f));
  EXPECT_EQ(Only(r, MsgType::Error)->header.error_code, ErrorCode::BadLength);
  // Non-finite values.
  auto nan = Filled(n0_, 0.5f);
  nan[3] = std::numeric_limits<float>::quiet_NaN();
  std::vector<uint8_t> raw(nan.size() * 4);
  std::memcpy(raw.data(), nan.data(), raw.size());
  auto ph = h_->PushFields(1, 0, 1, 1, n0_, 1, 1);
  r = h_->Send("a", ph, {raw});
  EXPECT_EQ(Only(r, MsgType::Error)->header.error_code, ErrorCode::BadCodec);
  // Garbage header; checksum mismatch.
  std::vector<zmq::message_t> junk;
  junk.emplace_back("not a flatbuffer at all", 23);
  r = h_->SendRaw("a", std::move(junk));
  EXPECT_EQ(Only(r, MsgType::Error)->header.error_code, ErrorCode::Malformed);
  ph.tokens = 10;
  auto frames = ShardHarness::Frames(ph, {std::vector<uint8_t>(n0_ * 4, 0)});
  static_cast<uint8_t*>(frames[1].data())[5] ^= 0xFF;
  r = h_->SendRaw("a", std::move(frames));
  const Outgoing* refused = Only(r, MsgType::Error);
  ASSERT_NE(refused, nullptr);
  EXPECT_EQ(refused->header.error_code, ErrorCode::BadChecksum);
  // The refusal names the push whose payload failed, so the worker knows what to resend.
  EXPECT_EQ(refused->header.worker_id, 1u);
  EXPECT_EQ(refused->header.fragment_id, 0u);
  EXPECT_EQ(refused->header.seq, 1u);
  EXPECT_EQ(refused->header.refused_type, MsgType::Push);

  EXPECT_TRUE(h_->Tick().empty());
  EXPECT_EQ(h_->shard().params(0), before);
  EXPECT_EQ(h_->shard().published_version(0), 1u);
  EXPECT_EQ(h_->shard().counters().pushes_queued, 0u);
}

TEST_F(ShardTest, InitIsAcceptedOnce) {
  SetUpShard(TinyOptions());
  auto r = h_->Init("b", 2, 0, Filled(n0_, 7.0f));
  const Outgoing* ack = Only(r, MsgType::PushAck);
  EXPECT_EQ(ack->header.ack, AckStatus::AlreadyInitialized);
  for (float v : h_->shard().params(0)) EXPECT_EQ(v, 1.0f);
  // Pull of an uninitialized fragment is refused, of an initialized one answered.
  auto pull = h_->Base(MsgType::Pull, 2);
  pull.fragment_id = 1;
  EXPECT_EQ(Only(h_->Send("b", pull), MsgType::Error)->header.error_code,
            ErrorCode::NotInitialized);
  pull.fragment_id = 0;
  auto u = h_->Send("b", pull);
  const Outgoing* up = Only(u, MsgType::FragmentUpdate);
  ASSERT_NE(up, nullptr);
  EXPECT_EQ(up->header.version, 1u);
  uint64_t bytes = 0;
  for (const auto& p : up->payloads) bytes += p.size();
  EXPECT_EQ(bytes, n0_ * 4);
}

class ShardStoreTest : public ::testing::Test {
 protected:
  ::diloco::testing::TempDir tmp_{"shard_store_"};
  std::filesystem::path dir_ = tmp_.dir() / "store";  // made by the shard
};

TEST_F(ShardStoreTest, RestartRecoversVersionsParamsAndDedup) {
  auto o = TinyOptions();
  o.store_path = dir_.string();
  o.durability = Durability::kPerRound;
  std::vector<float> params;
  {
    ShardHarness h(o);
    const uint64_t n = h.fragment(0).numel;
    h.Hello("a", 1);
    h.Init("a", 1, 0, Filled(n, 1.0f));
    h.Push("a", 1, 0, 1, 1, Filled(n, 0.25f));
    ASSERT_EQ(h.Tick().size(), 1u);  // per-round: written and synced, then published
    params = h.shard().params(0);
    ASSERT_EQ(h.shard().published_version(0), 2u);
  }  // dropped without a final checkpoint: a crash
  ShardHarness h(o);
  EXPECT_EQ(h.shard().published_version(0), 2u);
  EXPECT_EQ(h.shard().params(0), params);
  // The dedup table came back: the retried push is a duplicate.
  h.Hello("a", 1);
  auto r = h.Push("a", 1, 0, 1, 1, Filled(h.fragment(0).numel, 0.25f));
  EXPECT_EQ(Only(r, MsgType::PushAck)->header.ack, AckStatus::Duplicate);
}

TEST_F(ShardStoreTest, ForeignStoreIsRefused) {
  auto o = TinyOptions();
  o.store_path = dir_.string();
  { ShardHarness h(o); }
  o.num_fragments = 3;  // another plan
  FakeClock clock;
  auto s = Shard::Create(o, &clock);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition) << s.status();
}

}  // namespace
}  // namespace diloco::server::testing

namespace diloco::server::testing {
namespace {

// Two pushes into one shard and returns fragment 0's params afterwards.
std::vector<float> TwoPushes(ShardOptions o, const std::vector<float>& g1,
                             const std::vector<float>& g2) {
  ShardHarness h(std::move(o));
  const uint64_t n = h.fragment(0).numel;
  h.Hello("a", 1);
  h.Hello("b", 2);
  h.Init("a", 1, 0, std::vector<float>(n, 1.0f));
  h.Push("a", 1, 0, 1, 1, g1);
  h.Tick();
  h.Push("b", 2, 0, 1, 1, g2);
  h.Tick();
  return h.shard().params(0);
}

std::vector<float> Pattern(size_t n, int phase) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>((i + phase) % 3) * 0.1f;
  return v;
}

TEST(ShardModesTest, DelayedNesterovEqualsOneSynchronousStepForSimultaneousPushes) {
  auto sync = TinyOptions();
  sync.round.quorum = 2;
  auto dn = TinyOptions();
  dn.outer_mode = OuterMode::kDelayedNesterov;
  dn.dn_period = 2;
  const size_t n = ShardHarness(TinyOptions()).fragment(0).numel;
  const auto a = TwoPushes(sync, Pattern(n, 0), Pattern(n, 1));
  const auto b = TwoPushes(dn, Pattern(n, 0), Pattern(n, 1));
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 2e-6) << i;
  // And DN is not per-arrival Nesterov: that would differ visibly.
  auto per_arrival = TinyOptions();                    // quorum 1, each push its own round
  per_arrival.round.grace_cap = absl::ZeroDuration();  // every push closes its own round
  const auto c = TwoPushes(per_arrival, Pattern(n, 0), Pattern(n, 1));
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff = std::max(diff, std::abs(double(a[i]) - c[i]));
  EXPECT_GT(diff, 0.01);
}

TEST(ShardModesTest, RdaMergeKeepsTheMeanNormAlongTheMeanDirection) {
  auto o = TinyOptions();
  o.round.quorum = 2;
  o.merge = MergeRule::kRda;
  o.weights = WeightScheme::kUniform;
  const size_t n = ShardHarness(TinyOptions()).fragment(0).numel;
  const auto d1 = Pattern(n, 0), d2 = Pattern(n, 1);
  // Hand rule (kernels/outer.h) in double.
  auto norm = [](const std::vector<double>& v) {
    double s = 0;
    for (double x : v) s += x * x;
    return std::sqrt(s);
  };
  std::vector<double> a(d1.begin(), d1.end()), b(d2.begin(), d2.end()), u(n);
  const double na = norm(a), nb = norm(b), nbar = (na + nb) / 2;
  for (size_t i = 0; i < n; ++i) u[i] = (a[i] / na + b[i] / nb) / 2;
  const double nu = norm(u);
  const auto theta = TwoPushes(o, d1, d2);
  for (size_t i = 0; i < n; ++i) {
    const double merged = nbar * u[i] / nu;
    EXPECT_NEAR(theta[i], 1.0 - 0.7 * 1.9 * merged, 1e-5) << i;
  }
}

}  // namespace
}  // namespace diloco::server::testing

namespace diloco::server::testing {
namespace {

TEST(ShardFleetTest, FleetStepTimeIsTheFastestLiveWorkers) {
  auto o = TinyOptions();
  o.worker_timeout = absl::Seconds(2);
  ShardHarness h(o);
  auto hb = [&](const std::string& rid, uint32_t w, uint64_t us) {
    auto m = h.Base(wire::MsgType::Heartbeat, w);
    m.step_time_us = us;
    return h.Send(rid, m);
  };
  h.Hello("fast", 1);
  h.Hello("slow", 2);
  hb("fast", 1, 1000);
  auto r = hb("slow", 2, 5000);
  EXPECT_EQ(Only(r, wire::MsgType::Heartbeat)->header.fleet_step_time_us, 1000u);
  h.clock().Advance(absl::Seconds(1.5));
  r = hb("slow", 2, 5000);
  EXPECT_EQ(Only(r, wire::MsgType::Heartbeat)->header.fleet_step_time_us, 1000u);
  h.clock().Advance(absl::Seconds(1));  // the fast worker has been silent for 2.5 s: dead
  r = hb("slow", 2, 5000);
  EXPECT_EQ(Only(r, wire::MsgType::Heartbeat)->header.fleet_step_time_us, 5000u);
}

}  // namespace
}  // namespace diloco::server::testing
