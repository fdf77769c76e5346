// A push train cut by a lost connection, resumed on the worker's new one (docs/protocol.md
// "Trains"): the shard keeps the chunks it holds when the worker's Hello comes on another
// connection, lists them in the Welcome, completes the train from the chunks sent after it and
// handles the push exactly as if it had come whole (Queued, Applied, Duplicate, the same
// params); a theta(0) upload alike. A resumed chunk that does not continue what is held, or
// comes on a connection without a Hello, is refused and changes nothing; a kept train expires
// by the fake clock.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/checksum.h"
#include "tests/server/shard_harness.h"

namespace diloco::server::testing {
namespace {

using wire::AckStatus;
using wire::ErrorCode;
using wire::MsgType;

// One fragment of three 2^20-value chunks: a push of it travels as a train of three.
ShardOptions ResumeOptions() {
  auto o = TinyOptions(1);
  o.manifest = GptManifest(GptConfig{32768, 4, 1, 1, 64}).value();
  return o;
}

class ShardResumeTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(ResumeOptions()); }
  void Start(ShardOptions o) {
    h_ = std::make_unique<ShardHarness>(o);
    n_ = h_->fragment(0).numel;
    ASSERT_GT(n_, 2 * wire::ChunkElements(wire::kFragmentCodec.block)) << "not a 3-chunk train";
    h_->Hello("old", 1);
    ASSERT_EQ(
        Only(h_->Init("old", 1, 0, std::vector<float>(n_, 1.0f)), MsgType::PushAck)->header.ack,
        AckStatus::Initialized);
  }
  std::vector<float> DeltaOf(float scale) const {
    std::vector<float> d(n_);
    for (uint64_t i = 0; i < n_; ++i) d[i] = scale * (static_cast<float>(i % 7) - 3.0f);
    return d;
  }
  // Chunk k of worker 1's push `seq` of `delta` (fp32), as wire::Send cuts it.
  std::vector<zmq::message_t> Chunk(uint64_t seq, const std::vector<float>& delta,
                                    uint32_t k) const {
    const auto chunks = ShardHarness::Encode(wire::kFragmentCodec, delta);
    std::vector<uint64_t> sums;
    for (const auto& c : chunks) sums.push_back(Checksum64(c.data(), c.size()));
    auto h = h_->PushFields(1, 0, seq, 1, n_);
    h.num_chunks = static_cast<uint32_t>(chunks.size());
    h.chunk_index = k;
    h.train_checksum = wire::TrainChecksum(sums);
    return ShardHarness::Frames(h, {chunks[k]});
  }
  // Chunks 0 and 1 of the push on `from`, then worker 1's Hello on `to`: its Welcome.
  wire::HeaderFields CutAndHello(uint64_t seq, const std::vector<float>& delta,
                                 const std::string& from = "old", const std::string& to = "new") {
    for (uint32_t k = 0; k < 2; ++k) EXPECT_TRUE(h_->SendRaw(from, Chunk(seq, delta, k)).empty());
    auto out = h_->Hello(to, 1);
    const Outgoing* w = Only(out, MsgType::Welcome);
    return w ? w->header : wire::HeaderFields{};
  }
  uint64_t Stat(const std::string& key) const {
    const std::string j = h_->shard().StatsJson();
    const auto at = j.find("\"" + key + "\":");
    EXPECT_NE(at, std::string::npos) << key;
    return std::stoull(j.substr(at + key.size() + 3));
  }

  std::unique_ptr<ShardHarness> h_;
  uint64_t n_ = 0;
};

// theta(0) is the longest train a worker sends (the whole fragment in fp32): cut, it is kept and
// resumed as a push is, and initializes the fragment exactly as the values sent whole would.
TEST_F(ShardResumeTest, ACutThetaZeroUploadResumesAndInitializesTheFragment) {
  ShardHarness fresh(ResumeOptions());  // no theta(0) yet
  std::vector<float> theta(n_);
  for (uint64_t i = 0; i < n_; ++i) theta[i] = 0.1f * static_cast<float>(i % 5);
  const auto chunks = ShardHarness::Encode(wire::kFragmentCodec, theta);
  ASSERT_EQ(chunks.size(), 3u);
  std::vector<uint64_t> sums;
  for (const auto& c : chunks) sums.push_back(Checksum64(c.data(), c.size()));
  auto h = fresh.Base(MsgType::InitFragment, 1);
  h.fragment_id = 0;
  wire::SetPayloadLayout(h, wire::kFragmentCodec, n_);
  h.num_chunks = 3;
  h.train_checksum = wire::TrainChecksum(sums);
  auto chunk = [&](uint32_t k) {
    auto hk = h;
    hk.chunk_index = k;
    return ShardHarness::Frames(hk, {chunks[k]});
  };
  fresh.Hello("old", 1);
  for (uint32_t k = 0; k < 2; ++k) EXPECT_TRUE(fresh.SendRaw("old", chunk(k)).empty());
  const auto welcomed = fresh.Hello("new", 1);  // kept: Only points into it
  const Outgoing* w = Only(welcomed, MsgType::Welcome);
  ASSERT_NE(w, nullptr);
  ASSERT_EQ(w->header.held_trains.size(), 1u);
  EXPECT_EQ(w->header.held_trains[0].seq(), 0u) << "an upload, not a push";
  EXPECT_EQ(w->header.held_trains[0].chunks(), 2u);
  EXPECT_EQ(w->header.held_trains[0].train_checksum(), h.train_checksum);

  const auto out = fresh.SendRaw("new", chunk(2));  // kept: Only points into it
  const Outgoing* ack = Only(out, MsgType::PushAck);
  ASSERT_NE(ack, nullptr);
  EXPECT_EQ(ack->header.ack, AckStatus::Initialized);
  EXPECT_EQ(fresh.shard().params(0), theta);
}

TEST_F(ShardResumeTest, APushResumedOnANewConnectionIsTakenAsIfItCameWhole) {
  const auto delta = DeltaOf(0.01f);
  const wire::HeaderFields welcome = CutAndHello(1, delta);
  ASSERT_EQ(welcome.held_trains.size(), 1u);
  const wire::HeldTrain& held = welcome.held_trains[0];
  EXPECT_EQ(held.fragment_id(), 0u);
  EXPECT_EQ(held.seq(), 1u);
  EXPECT_EQ(held.chunks(), 2u);
  EXPECT_EQ(Stat("kept_trains"), 1u);
  EXPECT_GT(Stat("kept_train_bytes"), 2 * wire::ChunkElements(256) * 4 - 1);

  const auto out = h_->SendRaw("new", Chunk(1, delta, 2));
  const Outgoing* ack = Only(out, MsgType::PushAck);
  ASSERT_NE(ack, nullptr);
  EXPECT_EQ(ack->header.ack, AckStatus::Queued);
  EXPECT_EQ(ack->routing_id, "new");
  EXPECT_EQ(Stat("trains_resumed"), 1u);
  EXPECT_EQ(Stat("kept_trains"), 0u);
  h_->clock().Advance(absl::Seconds(6));
  const auto ticked = h_->Tick();  // kept: Only points into it
  const Outgoing* applied = Only(ticked, MsgType::FragmentUpdate);
  ASSERT_NE(applied, nullptr);
  EXPECT_EQ(applied->header.ack, AckStatus::Applied);
  EXPECT_EQ(applied->header.seq, 1u);

  // The same push taken whole by another shard: the same values.
  ShardHarness whole(ResumeOptions());
  whole.Hello("a", 1);
  whole.Init("a", 1, 0, std::vector<float>(n_, 1.0f));
  EXPECT_EQ(Only(whole.Push("a", 1, 0, 1, 1, delta), MsgType::PushAck)->header.ack,
            AckStatus::Queued);
  whole.clock().Advance(absl::Seconds(6));
  whole.Tick();
  EXPECT_EQ(h_->shard().params(0), whole.shard().params(0));

  // Resumed again after it was applied (its answer lost): Duplicate, as a whole resend is.
  ASSERT_EQ(CutAndHello(1, delta, "new", "newer").held_trains.size(), 1u);
  const auto answered = h_->SendRaw("newer", Chunk(1, delta, 2));  // kept: Only points into it
  const Outgoing* dup = Only(answered, MsgType::PushAck);
  ASSERT_NE(dup, nullptr);
  EXPECT_EQ(dup->header.ack, AckStatus::Duplicate);
  EXPECT_EQ(h_->shard().counters().pushes_queued, 1u);
}

TEST_F(ShardResumeTest, AChunkThatDoesNotContinueTheKeptTrainIsRefusedAndChangesNothing) {
  const auto delta = DeltaOf(0.01f);
  ASSERT_EQ(CutAndHello(1, delta).held_trains.size(), 1u);
  const auto before = h_->shard().params(0);
  // Another payload under the same seq: its chunk 2 is sound, but not this train's.
  const auto refused =
      h_->SendRaw("new", Chunk(1, DeltaOf(0.02f), 2));  // kept: Only points into it
  const Outgoing* e = Only(refused, MsgType::Error);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->header.error_code, ErrorCode::TrainNotHeld);
  EXPECT_EQ(e->header.seq, 1u);
  EXPECT_EQ(e->header.refused_type, MsgType::Push);
  // A gap: chunk 1 is held already.
  EXPECT_EQ(Only(h_->SendRaw("new", Chunk(1, delta, 1)), MsgType::Error)->header.error_code,
            ErrorCode::TrainNotHeld);
  // On a connection that never said Hello: refused for its identity, before anything is looked up.
  EXPECT_EQ(Only(h_->SendRaw("stranger", Chunk(1, delta, 2)), MsgType::Error)->header.error_code,
            ErrorCode::BadIdentity);
  h_->clock().Advance(absl::Seconds(6));
  EXPECT_TRUE(h_->Tick().empty());
  EXPECT_EQ(h_->shard().params(0), before);
  EXPECT_EQ(h_->shard().counters().pushes_queued, 0u);
  EXPECT_EQ(Stat("kept_trains"), 1u) << "still held for the right chunk";
  // The right chunk still completes it, sent after a whole message (which ends what is left of
  // the refused gap's train: its chunk 2 would be dropped unanswered as that train's).
  ASSERT_NE(Only(h_->Hello("new", 1), MsgType::Welcome), nullptr);
  EXPECT_EQ(Only(h_->SendRaw("new", Chunk(1, delta, 2)), MsgType::PushAck)->header.ack,
            AckStatus::Queued);
}

TEST_F(ShardResumeTest, AKeptTrainExpiresAndIsThenRefusedForAWholeResend) {
  const auto delta = DeltaOf(0.01f);
  ASSERT_EQ(CutAndHello(1, delta).held_trains.size(), 1u);
  h_->clock().Advance(absl::Minutes(5) + absl::Seconds(1));
  h_->Tick();
  EXPECT_EQ(Stat("kept_trains"), 0u);
  EXPECT_EQ(Stat("kept_trains_expired"), 1u);
  EXPECT_TRUE(Only(h_->Hello("new", 1), MsgType::Welcome)->header.held_trains.empty());
  EXPECT_EQ(Only(h_->SendRaw("new", Chunk(1, delta, 2)), MsgType::Error)->header.error_code,
            ErrorCode::TrainNotHeld);
  // Sent whole, it is taken.
  for (uint32_t k = 0; k < 2; ++k) EXPECT_TRUE(h_->SendRaw("new", Chunk(1, delta, k)).empty());
  EXPECT_EQ(Only(h_->SendRaw("new", Chunk(1, delta, 2)), MsgType::PushAck)->header.ack,
            AckStatus::Queued);
}

TEST_F(ShardResumeTest, WithKeepingOffACutTrainIsDroppedAsBefore) {
  auto o = ResumeOptions();
  o.keep_trains.bytes = 0;
  Start(o);
  const auto delta = DeltaOf(0.01f);
  EXPECT_TRUE(CutAndHello(1, delta).held_trains.empty());
  EXPECT_EQ(Only(h_->SendRaw("new", Chunk(1, delta, 2)), MsgType::Error)->header.error_code,
            ErrorCode::TrainNotHeld);
  EXPECT_EQ(Stat("trains_kept"), 0u);
}

// The byte bound over two workers' cut trains: the older is dropped, the newer resumes.
TEST_F(ShardResumeTest, BeyondTheByteBoundTheOldestKeptTrainGoes) {
  auto o = ResumeOptions();
  o.keep_trains.bytes = 3 * wire::ChunkElements(256) * 4;  // room for one cut train of two chunks
  Start(o);
  const auto delta = DeltaOf(0.01f);
  ASSERT_EQ(CutAndHello(1, delta).held_trains.size(), 1u);
  // Worker 2, cut the same way a second later.
  h_->clock().Advance(absl::Seconds(1));
  h_->Hello("old2", 2);
  for (uint32_t k = 0; k < 2; ++k) {
    auto h = h_->PushFields(2, 0, 1, 1, n_);
    auto chunks = ShardHarness::Encode(wire::kFragmentCodec, delta);
    std::vector<uint64_t> sums;
    for (const auto& c : chunks) sums.push_back(Checksum64(c.data(), c.size()));
    h.num_chunks = 3;
    h.chunk_index = k;
    h.train_checksum = wire::TrainChecksum(sums);
    EXPECT_TRUE(h_->SendRaw("old2", ShardHarness::Frames(h, {chunks[k]})).empty());
  }
  EXPECT_EQ(Only(h_->Hello("new2", 2), MsgType::Welcome)->header.held_trains.size(), 1u);
  EXPECT_EQ(Stat("kept_trains"), 1u);
  EXPECT_EQ(Stat("kept_trains_evicted"), 1u);
  EXPECT_TRUE(Only(h_->Hello("new", 1), MsgType::Welcome)->header.held_trains.empty())
      << "worker 1's, the older, went";
}

}  // namespace
}  // namespace diloco::server::testing
