// A push train cut by a refused chunk, then resent with the same seq: the shard answers the cut
// train once (the refusal of the chunk that ended it), drops its later chunks unanswered, and
// applies the resend exactly once. A refusal of the cut train's later chunks, arriving at the
// worker after it resent the push, would read as the resend's own and make the worker give the
// push up (undo its error feedback) while the resend is applied: the delta counted twice
// (docs/protocol.md "Trains", docs/worker.md "Acks, resends, exactly once").
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "tests/server/shard_harness.h"

namespace diloco::server::testing {
namespace {

using wire::AckStatus;
using wire::ErrorCode;
using wire::MsgType;

// One fragment of more than two 2^20-value chunks: a push of it travels as a train of three.
ShardOptions TrainOptions() {
  auto o = TinyOptions(1);
  o.manifest = GptManifest(GptConfig{32768, 4, 1, 1, 64}).value();
  return o;
}

// How the refused chunk of the first send is damaged.
enum class Damage { kPayload, kHeader };

class ShardTrainCutTest : public ::testing::TestWithParam<std::tuple<uint32_t, Damage>> {
 protected:
  void SetUp() override {
    h_ = std::make_unique<ShardHarness>(TrainOptions());
    n_ = h_->fragment(0).numel;
    ASSERT_GT(n_, 2 * wire::ChunkElements(wire::kFragmentCodec.block)) << "not a 3-chunk train";
    theta_.assign(n_, 1.0f);
    delta_.resize(n_);
    for (uint64_t i = 0; i < n_; ++i) delta_[i] = 0.25f * static_cast<float>(i % 7) - 0.5f;
    h_->Hello("a", 1);
    ASSERT_EQ(Only(h_->Init("a", 1, 0, theta_), MsgType::PushAck)->header.ack,
              AckStatus::Initialized);
  }

  // Chunk k of the push train of (worker 1, fragment 0, `seq`), as wire::Send cuts it.
  std::vector<zmq::message_t> Chunk(uint64_t seq, uint32_t k) const {
    const auto chunks = ShardHarness::Encode(wire::kFragmentCodec, delta_);
    auto h = h_->PushFields(1, 0, seq, 1, n_);
    h.num_chunks = static_cast<uint32_t>(chunks.size());
    h.chunk_index = k;
    return ShardHarness::Frames(h, {chunks[k]});
  }
  uint32_t NumChunks() const {
    return static_cast<uint32_t>(ShardHarness::Encode(wire::kFragmentCodec, delta_).size());
  }

  std::unique_ptr<ShardHarness> h_;
  uint64_t n_ = 0;
  std::vector<float> theta_, delta_;
};

TEST_P(ShardTrainCutTest, ACutTrainIsAnsweredOnceAndItsResendIsAppliedOnce) {
  const auto [cut_at, damage] = GetParam();
  const uint32_t chunks = NumChunks();
  ASSERT_EQ(chunks, 3u);

  // The first send: chunk `cut_at` damaged on the way.
  std::vector<Outgoing> answers;
  for (uint32_t k = 0; k < chunks; ++k) {
    auto frames = Chunk(1, k);
    if (k == cut_at) {
      auto& f = damage == Damage::kPayload ? frames[1] : frames[0];
      static_cast<uint8_t*>(f.data())[f.size() / 2] ^= 0x10;
    }
    auto out = h_->SendRaw("a", std::move(frames));
    if (k < cut_at) {
      EXPECT_TRUE(out.empty()) << "chunk " << k << " is held, not answered";
    }
    for (auto& o : out) answers.push_back(std::move(o));
  }
  // One answer for the whole send: the damaged chunk's BadChecksum. A payload's names the push
  // (the worker resends it at once), a header's names nothing (the lost-push resend recovers).
  ASSERT_EQ(answers.size(), 1u) << "the cut train's later chunks must not be answered";
  const wire::HeaderFields& refusal = answers[0].header;
  EXPECT_EQ(refusal.type, MsgType::Error);
  EXPECT_EQ(refusal.error_code, ErrorCode::BadChecksum);
  if (damage == Damage::kPayload) {
    EXPECT_EQ(refusal.seq, 1u);
    EXPECT_EQ(refusal.fragment_id, 0u);
    EXPECT_EQ(refusal.refused_type, MsgType::Push);
  } else {
    EXPECT_EQ(refusal.seq, 0u);
    EXPECT_EQ(refusal.refused_type, MsgType::Invalid);
  }
  const ShardCounters& c = h_->shard().counters();
  EXPECT_EQ(c.cut_train_chunks, chunks - 1 - cut_at);
  EXPECT_EQ(c.pushes_queued, 0u);

  // The resend, same seq, intact: taken, then applied once.
  std::vector<Outgoing> resend;
  for (uint32_t k = 0; k < chunks; ++k) {
    auto out = h_->SendRaw("a", Chunk(1, k));
    if (k + 1 < chunks) {
      EXPECT_TRUE(out.empty()) << "chunk " << k;
    }
    for (auto& o : out) resend.push_back(std::move(o));
  }
  ASSERT_EQ(resend.size(), 1u);
  EXPECT_EQ(resend[0].header.type, MsgType::PushAck);
  EXPECT_EQ(resend[0].header.ack, AckStatus::Queued);
  auto closed = h_->Tick();
  const Outgoing* applied = Only(closed, MsgType::FragmentUpdate);
  ASSERT_NE(applied, nullptr);
  EXPECT_EQ(applied->header.ack, AckStatus::Applied);
  EXPECT_EQ(applied->header.seq, 1u);
  EXPECT_EQ(h_->shard().published_version(0), 2u);
  EXPECT_EQ(c.pushes_queued, 1u);

  // The same push applied once on a shard that never saw the damaged send.
  ShardHarness clean(TrainOptions());
  clean.Hello("a", 1);
  clean.Init("a", 1, 0, theta_);
  for (uint32_t k = 0; k < chunks; ++k) (void)clean.SendRaw("a", Chunk(1, k));
  (void)clean.Tick();
  EXPECT_EQ(h_->shard().params(0), clean.shard().params(0));

  // Sent once more (a third copy): a duplicate, not applied again.
  std::vector<Outgoing> again;
  for (uint32_t k = 0; k < chunks; ++k)
    for (auto& o : h_->SendRaw("a", Chunk(1, k))) again.push_back(std::move(o));
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].header.ack, AckStatus::Duplicate);
  (void)h_->Tick();
  EXPECT_EQ(h_->shard().published_version(0), 2u);
}

INSTANTIATE_TEST_SUITE_P(CutAt, ShardTrainCutTest,
                         ::testing::Combine(::testing::Values(0u, 1u),
                                            ::testing::Values(Damage::kPayload, Damage::kHeader)));

// A chunk out of place is still refused once, naming the push it claims; the rest of its train
// is dropped unanswered, and a new train on the connection is answered as usual.
TEST(ShardTrainCutRuleTest, AChunkOutOfPlaceIsRefusedOnceAndTheRestOfItsTrainIsDropped) {
  ShardHarness h(TrainOptions());
  const uint64_t n = h.fragment(0).numel;
  h.Hello("a", 1);
  h.Init("a", 1, 0, std::vector<float>(n, 1.0f));
  const auto chunks = ShardHarness::Encode(wire::kFragmentCodec, std::vector<float>(n, 0.5f));
  ASSERT_EQ(chunks.size(), 3u);
  auto chunk = [&](uint64_t seq, uint32_t k) {
    auto f = h.PushFields(1, 0, seq, 1, n);
    f.num_chunks = 3;
    f.chunk_index = k;
    return ShardHarness::Frames(f, {chunks[k]});
  };
  // Chunk 1 with no train started: refused (the sender's bug, or a train whose chunk 0 was lost
  // with the connection), naming the push; its chunk 2 is not answered again.
  auto r = h.SendRaw("a", chunk(1, 1));
  const Outgoing* e = Only(r, MsgType::Error);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->header.error_code, ErrorCode::Malformed);
  EXPECT_EQ(e->header.seq, 1u);
  EXPECT_TRUE(h.SendRaw("a", chunk(1, 2)).empty());
  EXPECT_EQ(h.shard().counters().cut_train_chunks, 1u);
  // Another push's later chunk is not the cut train's: refused in its own right.
  r = h.SendRaw("a", chunk(2, 2));
  e = Only(r, MsgType::Error);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->header.seq, 2u);
  // A whole train afterwards is taken.
  std::vector<Outgoing> out;
  for (uint32_t k = 0; k < 3; ++k)
    for (auto& o : h.SendRaw("a", chunk(1, k))) out.push_back(std::move(o));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0].header.ack, AckStatus::Queued);
}

}  // namespace
}  // namespace diloco::server::testing
