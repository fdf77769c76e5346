// Leave (docs/protocol.md, "Leaving"): a worker that is done tells the shard, which drops its
// generation from the live set at once. A round waiting on it closes, a round it misses counts
// it as a zero delta for the worker timeout and no longer, the quorum drops with the fleet. A
// repeated Leave is answered again and changes nothing; a Leave of a superseded generation, of an
// unbound connection or with a payload is refused and changes nothing; a new generation of the
// worker rejoins.
#include <gtest/gtest.h>

#include "tests/server/shard_harness.h"

namespace diloco::server::testing {
namespace {

using wire::AckStatus;
using wire::ErrorCode;
using wire::MsgType;

std::vector<float> Filled(size_t n, float v) { return std::vector<float>(n, v); }

class ShardLeaveTest : public ::testing::Test {
 protected:
  // Workers 1 ("a") and 2 ("b") at quorum 2, not elastic, a grace cap no round in these tests
  // reaches; round 1 holds both (theta 1 -> 0.734 with the default outer step).
  void SetUp() override { Start(2); }
  void Start(uint32_t quorum, uint32_t workers = 2) {
    auto o = TinyOptions();
    o.round.quorum = quorum;
    o.round.grace_cap = absl::Seconds(30);
    h_ = std::make_unique<ShardHarness>(std::move(o));
    n_ = h_->fragment(0).numel;
    for (uint32_t w = 1; w <= workers; ++w) h_->Hello(Rid(w), w);
    ASSERT_EQ(Only(h_->Init("a", 1, 0, Filled(n_, 1.0f)), MsgType::PushAck)->header.ack,
              AckStatus::Initialized);
    for (uint32_t w = 1; w <= workers; ++w) h_->Push(Rid(w), w, 0, 1, 1, Filled(n_, 0.2f));
    ASSERT_EQ(h_->Tick().size(), workers);  // every live worker pushed: closes at once
    ASSERT_EQ(h_->shard().published_version(0), 2u);
  }
  static std::string Rid(uint32_t worker) {
    return std::string(1, static_cast<char>('a' + worker - 1));
  }
  std::vector<Outgoing> Leave(const std::string& rid, uint32_t worker, uint64_t gen = 1,
                              const std::vector<std::vector<uint8_t>>& payloads = {}) {
    return h_->Send(rid, h_->Base(MsgType::Leave, worker, gen), payloads);
  }
  static ErrorCode Refusal(const std::vector<Outgoing>& out) {
    const Outgoing* e = Only(out, MsgType::Error);
    if (e == nullptr) return ErrorCode::None;
    EXPECT_EQ(e->header.refused_type, MsgType::Leave);
    return e->header.error_code;
  }
  const ShardCounters& counters() { return h_->shard().counters(); }

  std::unique_ptr<ShardHarness> h_;
  uint64_t n_ = 0;
};

TEST_F(ShardLeaveTest, ALeaveIsAnsweredAndTakesTheWorkerOutOfTheLiveSet) {
  ASSERT_EQ(h_->shard().live_workers(), 2u);
  auto out = Leave("b", 2);
  const Outgoing* ack = Only(out, MsgType::Leave);
  ASSERT_NE(ack, nullptr);
  EXPECT_EQ(ack->routing_id, "b");
  EXPECT_EQ(ack->header.worker_id, 2u);
  EXPECT_EQ(ack->header.generation, 1u);
  EXPECT_EQ(h_->shard().live_workers(), 1u);
  EXPECT_EQ(counters().leaves, 1u);
  bool logged = false;
  for (const std::string& line : h_->shard().TakeLogLines())
    logged |= line.find("worker 2 generation 1 left") != std::string::npos;
  EXPECT_TRUE(logged);
}

// Round 2 holds worker 1's push and waits for worker 2 (quorum 2, not elastic: until the 30 s
// cap). Worker 2 leaves: the round closes at once, as half of a full round (worker 2 a zero
// delta within the worker timeout: 0.57265, ShardRoundNormTest), not as a whole one (0.3546).
TEST_F(ShardLeaveTest, ARoundWaitingOnTheLeaverClosesAtOnce) {
  h_->Push("a", 1, 0, 2, 2, Filled(n_, 0.2f));
  h_->clock().Advance(absl::Seconds(5));
  EXPECT_TRUE(h_->Tick().empty());  // waits for worker 2
  ASSERT_NE(Only(Leave("b", 2), MsgType::Leave), nullptr);
  auto out = h_->Tick();
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].header.ack, AckStatus::Applied);
  EXPECT_EQ(out[0].header.version, 3u);
  EXPECT_NEAR(h_->shard().params(0)[0], 0.57265, 1e-6);
  // The next round too: worker 1 alone is the fleet, its push closes it at once.
  h_->Push("a", 1, 0, 3, 3, Filled(n_, 0.2f));
  EXPECT_EQ(h_->Tick().size(), 1u);
  EXPECT_EQ(h_->shard().published_version(0), 4u);
}

// The leaver's push already in the open round stays there: merged, and its round closes with
// the quorum it has (2 pushes, quorum now 1).
TEST_F(ShardLeaveTest, TheLeaversPushInTheOpenRoundIsMerged) {
  h_->Push("b", 2, 0, 2, 2, Filled(n_, 0.2f));
  EXPECT_TRUE(h_->Tick().empty());  // waits for worker 1
  ASSERT_NE(Only(Leave("b", 2), MsgType::Leave), nullptr);
  auto out = h_->Tick();  // worker 1 is live and missing, but the quorum is met: grace
  EXPECT_TRUE(out.empty());
  h_->Push("a", 1, 0, 2, 2, Filled(n_, 0.2f));
  out = h_->Tick();
  ASSERT_EQ(out.size(), 2u);
  EXPECT_NEAR(h_->shard().params(0)[0], 0.3546, 1e-6);
}

// A leaver is never waited for, but for the worker timeout (10 s here) after its Leave it
// still weighs in a round's share as a zero delta, as a worker gone silent does: a fleet that
// ends together merges its last pushes as one round's worth of work, and the last learner
// alone does not take whole outer steps on its own last deltas. Past that it weighs no more.
// The shares are read off round_share, an EMA (0.05) of each closed round's share.
TEST_F(ShardLeaveTest, ALeaverWeighsAsAZeroDeltaForTheWorkerTimeoutAndNoLonger) {
  ASSERT_NEAR(counters().round_share, 1.0, 1e-12);
  h_->clock().Advance(absl::Seconds(1));
  ASSERT_NE(Only(Leave("b", 2), MsgType::Leave), nullptr);
  h_->clock().Advance(absl::Seconds(8));  // t = 9: within the timeout of worker 2's Leave
  h_->Push("a", 1, 0, 2, 2, Filled(n_, 0.2f));
  ASSERT_EQ(h_->Tick().size(), 1u) << "the round waited for the leaver";
  const double ema1 = counters().round_share, share1 = (ema1 - 0.95) / 0.05;
  EXPECT_NEAR(share1, 0.5, 1e-9) << "the leaver no longer weighs in its round";
  h_->clock().Advance(absl::Seconds(4));  // t = 13: past it
  h_->Push("a", 1, 0, 3, 3, Filled(n_, 0.2f));
  ASSERT_EQ(h_->Tick().size(), 1u);
  EXPECT_NEAR((counters().round_share - 0.95 * ema1) / 0.05, 1.0, 1e-9)
      << "the leaver still weighs after the worker timeout";
}

TEST_F(ShardLeaveTest, ARepeatedLeaveIsAnsweredAgainAndChangesNothing) {
  ASSERT_NE(Only(Leave("b", 2), MsgType::Leave), nullptr);
  (void)h_->shard().TakeLogLines();
  auto out = Leave("b", 2);
  const Outgoing* ack = Only(out, MsgType::Leave);
  ASSERT_NE(ack, nullptr);
  EXPECT_EQ(ack->header.generation, 1u);
  EXPECT_EQ(counters().leaves, 1u);
  EXPECT_EQ(counters().leaves_repeated, 1u);
  EXPECT_EQ(counters().messages_bad, 0u);
  EXPECT_EQ(h_->shard().live_workers(), 1u);
  EXPECT_TRUE(h_->shard().TakeLogLines().empty());
  // Also on the control connection, where the worker may send it.
  auto hello = h_->Base(MsgType::Hello, 1);
  hello.channel = wire::Channel::Control;
  ASSERT_NE(Only(h_->Send("a-ctl", hello), MsgType::Welcome), nullptr);
  ASSERT_NE(Only(Leave("a-ctl", 1), MsgType::Leave), nullptr);
  EXPECT_EQ(h_->shard().live_workers(), 0u);
  EXPECT_EQ(counters().leaves, 2u);
}

// Heartbeats after the Leave (sent before its answer came) do not bring the worker back.
TEST_F(ShardLeaveTest, AWorkerThatLeftStaysGone) {
  ASSERT_NE(Only(Leave("b", 2), MsgType::Leave), nullptr);
  ASSERT_NE(Only(h_->Send("b", h_->Base(MsgType::Heartbeat, 2)), MsgType::Heartbeat), nullptr);
  EXPECT_EQ(h_->shard().live_workers(), 1u);
  // What would change state is refused: a push, a pull, a Hello of the generation that left.
  auto push = h_->Push("b", 2, 0, 2, 2, Filled(n_, 0.2f));
  const Outgoing* e = Only(push, MsgType::Error);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->header.error_code, ErrorCode::BadIdentity);
  EXPECT_NE(e->header.message.find("has left"), std::string::npos) << e->header.message;
  auto pull = h_->Base(MsgType::Pull, 2);
  EXPECT_EQ(Only(h_->Send("b", pull), MsgType::Error)->header.error_code, ErrorCode::BadIdentity);
  EXPECT_EQ(Only(h_->Hello("b", 2), MsgType::Error)->header.error_code, ErrorCode::BadIdentity);
  EXPECT_EQ(h_->shard().live_workers(), 1u);
  h_->Push("a", 1, 0, 2, 2, Filled(n_, 0.2f));
  EXPECT_EQ(h_->Tick().size(), 1u);  // worker 1 alone: closes at once
}

// A later start of the worker is a new generation: it rejoins, and the quorum is the fleet's
// again (a lone push waits for it).
TEST_F(ShardLeaveTest, ANewGenerationRejoins) {
  ASSERT_NE(Only(Leave("b", 2), MsgType::Leave), nullptr);
  ASSERT_NE(Only(h_->Hello("b2", 2, /*gen=*/2), MsgType::Welcome), nullptr);
  EXPECT_EQ(h_->shard().live_workers(), 2u);
  h_->Push("a", 1, 0, 2, 2, Filled(n_, 0.2f));
  h_->clock().Advance(absl::Seconds(5));
  EXPECT_TRUE(h_->Tick().empty());  // waits for worker 2's new generation
  auto push = h_->PushFields(2, 0, 1, 2, n_);
  push.generation = 2;
  h_->Send("b2", push, ShardHarness::Encode(wire::kFragmentCodec, Filled(n_, 0.2f)));
  EXPECT_EQ(h_->Tick().size(), 2u);
}

TEST_F(ShardLeaveTest, AStaleGenerationsLeaveIsRefusedAndChangesNothing) {
  ASSERT_NE(Only(h_->Hello("b2", 2, /*gen=*/2), MsgType::Welcome), nullptr);
  // The old process's connection was unbound by the new Hello; on the new one, the old
  // generation is superseded.
  EXPECT_EQ(Refusal(Leave("b", 2, /*gen=*/1)), ErrorCode::BadIdentity);
  EXPECT_EQ(Refusal(Leave("b2", 2, /*gen=*/1)), ErrorCode::BadIdentity);
  // Nobody bound: a worker that never said Hello, another worker's connection.
  EXPECT_EQ(Refusal(Leave("c", 3)), ErrorCode::BadIdentity);
  EXPECT_EQ(Refusal(Leave("a", 2, /*gen=*/2)), ErrorCode::BadIdentity);
  EXPECT_EQ(counters().leaves, 0u);
  EXPECT_EQ(counters().leaves_refused, 4u);
  EXPECT_EQ(h_->shard().live_workers(), 2u);
  h_->Push("a", 1, 0, 2, 2, Filled(n_, 0.2f));
  h_->clock().Advance(absl::Seconds(5));
  EXPECT_TRUE(h_->Tick().empty());  // worker 2 (generation 2) still waited for
}

TEST_F(ShardLeaveTest, AMalformedLeaveIsRefusedAndChangesNothing) {
  EXPECT_EQ(Refusal(Leave("b", 2, 1, {{1, 2, 3, 4}})), ErrorCode::Malformed);
  auto plan = h_->Base(MsgType::Leave, 2);
  plan.plan_fingerprint ^= 1;
  EXPECT_EQ(Refusal(h_->Send("b", plan)), ErrorCode::WrongPlan);
  // A header damaged on the way names nothing: refused before it is read.
  auto frames = ShardHarness::Frames(h_->Base(MsgType::Leave, 2), {});
  frames[0].data<uint8_t>()[8] ^= 0x10;
  auto damaged = h_->SendRaw("b", std::move(frames));
  const Outgoing* e = Only(damaged, MsgType::Error);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->header.error_code, ErrorCode::BadChecksum);
  EXPECT_EQ(counters().leaves, 0u);
  EXPECT_EQ(counters().leaves_refused, 2u);
  EXPECT_EQ(h_->shard().live_workers(), 2u);
  h_->Push("a", 1, 0, 2, 2, Filled(n_, 0.2f));
  h_->clock().Advance(absl::Seconds(5));
  EXPECT_TRUE(h_->Tick().empty());
}

// At quorum 2 of three workers, one leaving leaves two: a lone push still waits for a second
// (the quorum drops only as far as the fleet that stays needs), and a second push closes it.
TEST(ShardLeaveQuorumTest, TheQuorumDropsOnlyAsFarAsTheFleetThatStays) {
  auto o = TinyOptions();
  o.round.quorum = 2;
  o.round.grace_cap = absl::Seconds(30);
  o.round.min_grace = absl::Seconds(1);
  ShardHarness h(o);
  const uint64_t n = h.fragment(0).numel;
  for (const char* rid : {"a", "b", "c"}) h.Hello(rid, static_cast<uint32_t>(rid[0] - 'a' + 1));
  h.Init("a", 1, 0, Filled(n, 1.0f));
  ASSERT_NE(Only(h.Send("c", h.Base(MsgType::Leave, 3)), MsgType::Leave), nullptr);
  h.Push("a", 1, 0, 1, 1, Filled(n, 0.2f));
  h.clock().Advance(absl::Seconds(5));
  EXPECT_TRUE(h.Tick().empty());  // one push of a quorum of 2
  h.Push("b", 2, 0, 1, 1, Filled(n, 0.2f));
  EXPECT_EQ(h.Tick().size(), 2u);
}

}  // namespace
}  // namespace diloco::server::testing
