// Flow control by credit: a shard holds at most worker_credit_bytes of one worker's pushes in
// its open rounds (one push always fits); a push beyond it is refused NoCredit, changes no
// state, and goes through once a round closes and frees the credit. Welcome announces it.
#include <gtest/gtest.h>

#include "tests/server/shard_harness.h"

namespace diloco::server::testing {
namespace {

using wire::AckStatus;
using wire::ErrorCode;
using wire::MsgType;

class ShardCreditTest : public ::testing::Test {
 protected:
  // Four fragments of worker 1, theta(0) set, and a credit of `pushes` fp32 pushes of
  // fragment 0's size (quorum 2, so rounds stay open until the grace cap).
  void Start(double pushes) {
    auto o = TinyOptions(4);
    o.round.quorum = 2;
    o.round.grace_cap = absl::Seconds(5);
    ShardHarness probe(o);
    push_bytes_ = probe.fragment(0).numel * 4;
    o.worker_credit_bytes = static_cast<uint64_t>(pushes * static_cast<double>(push_bytes_));
    h_ = std::make_unique<ShardHarness>(o);
    welcome_ = Only(h_->Hello("a", 1), MsgType::Welcome)->header;
    for (uint32_t f = 0; f < 4; ++f)
      ASSERT_EQ(Only(h_->Init("a", 1, f, Filled(f, 1.0f)), MsgType::PushAck)->header.ack,
                AckStatus::Initialized);
  }
  std::vector<float> Filled(uint32_t fragment, float v) const {
    return std::vector<float>(h_->fragment(fragment).numel, v);
  }
  std::vector<Outgoing> PushFragment(uint32_t f, uint64_t seq = 1) {
    return h_->Push("a", 1, f, seq, 1, Filled(f, 0.25f));
  }
  static bool Queued(const std::vector<Outgoing>& out) {
    for (const auto& o : out)
      if (o.header.type == MsgType::PushAck && o.header.ack == AckStatus::Queued) return true;
    return false;
  }
  std::unique_ptr<ShardHarness> h_;
  wire::HeaderFields welcome_;
  uint64_t push_bytes_ = 0;
};

TEST_F(ShardCreditTest, WelcomeAnnouncesTheCredit) {
  Start(2.5);
  EXPECT_EQ(welcome_.credit_bytes, static_cast<uint64_t>(2.5 * push_bytes_));
}

TEST_F(ShardCreditTest, PushBeyondTheCreditIsRefusedAndChangesNothing) {
  Start(2.5);  // fragments are about the same size: two fit, a third does not
  ASSERT_TRUE(Queued(PushFragment(0)));
  ASSERT_TRUE(Queued(PushFragment(1)));
  const auto before = h_->shard().params(2);
  auto out = PushFragment(2);
  const Outgoing* e = Only(out, MsgType::Error);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->header.error_code, ErrorCode::NoCredit);
  EXPECT_EQ(e->header.fragment_id, 2u);
  EXPECT_EQ(e->header.seq, 1u);
  EXPECT_EQ(h_->shard().counters().pushes_queued, 2u);
  EXPECT_EQ(h_->shard().counters().pushes_no_credit, 1u);
  EXPECT_LE(h_->shard().counters().max_held_bytes, welcome_.credit_bytes);
  // Fragment 2's round never opened: nothing to close, nothing applied.
  h_->clock().Advance(absl::Seconds(6));
  auto closed = h_->Tick();
  EXPECT_EQ(closed.size(), 2u);  // the updates of fragments 0 and 1
  for (const auto& o : closed) EXPECT_NE(o.header.fragment_id, 2u);
  EXPECT_EQ(h_->shard().params(2), before);
  EXPECT_EQ(h_->shard().published_version(2), 1u);
  // The closed rounds freed the credit: the same push (same seq) is taken now.
  EXPECT_TRUE(Queued(PushFragment(2)));
  h_->clock().Advance(absl::Seconds(6));
  EXPECT_EQ(Only(h_->Tick(), MsgType::FragmentUpdate)->header.fragment_id, 2u);
  EXPECT_EQ(h_->shard().published_version(2), 2u);
}

TEST_F(ShardCreditTest, OnePushAlwaysFitsEvenAboveTheCredit) {
  Start(0.5);
  EXPECT_TRUE(Queued(PushFragment(0)));
  EXPECT_EQ(Only(PushFragment(1), MsgType::Error)->header.error_code, ErrorCode::NoCredit);
}

TEST_F(ShardCreditTest, NoCreditMeansOnePushPerFragmentOnly) {
  Start(0);
  for (uint32_t f = 0; f < 4; ++f) EXPECT_TRUE(Queued(PushFragment(f)));
  EXPECT_EQ(h_->shard().counters().pushes_no_credit, 0u);
  EXPECT_GE(h_->shard().counters().max_held_bytes, 3 * push_bytes_);
}

TEST_F(ShardCreditTest, AnotherWorkersPushesDoNotUseThisWorkersCredit) {
  Start(1.5);
  h_->Hello("b", 2);
  ASSERT_TRUE(Queued(PushFragment(0)));
  EXPECT_TRUE(Queued(h_->Push("b", 2, 1, 1, 1, Filled(1, 0.5f))));
  EXPECT_EQ(Only(PushFragment(1), MsgType::Error)->header.error_code, ErrorCode::NoCredit);
}

}  // namespace
}  // namespace diloco::server::testing
