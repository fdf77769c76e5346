// A push cut by a lost connection resumes (docs/protocol.md "Trains"): the session reconnects as
// soon as the transport says the data connection was lost, and when the shard's Welcome lists
// the push's leading chunks as held, its next send carries only the chunks after them (the
// recording transport sees the send start at that chunk, and the bytes sent count only those).
// A held train that is not this push's payload, or a shard that lists nothing (an older one),
// gets the push whole; a resumed send the shard refuses TrainNotHeld goes again whole at once.
// A theta(0) upload resumes alike when its values are the cut upload's.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/worker/recording_transport.h"
#include "worker/model/gpt/gpt_config.h"
#include "worker/shard_session.h"
#include "worker/sync_shared.h"

namespace diloco::worker {
namespace {

using wire::MsgType;

class ShardSessionResumeTest : public ::testing::Test {
 protected:
  // One fragment of ~2.3 Mi values: an int8 push of it is a train of three chunks.
  ShardSessionResumeTest()
      : manifest_(*GptManifest(GptConfig{32768, 4, 1, 1, 64})),
        plan_(*Plan::Create(manifest_, /*num_fragments=*/1, /*num_shards=*/1)),
        shared_(1, 1, 64) {
    opt_.servers = {"tcp://127.0.0.1:9"};
    opt_.num_fragments = 1;
    opt_.codec = {kernels::CodecKind::kInt8, 256};
    opt_.shard_timeout = absl::Hours(1);
    delta_.assign(plan_.fragment(0).numel, 0.0f);
    for (size_t i = 0; i < delta_.size(); ++i) delta_[i] = 1e-3f * static_cast<float>(i % 113);
    who_ = {plan_.fingerprint(), manifest_.fingerprint(), 5, 99};
    session_ = std::make_unique<ShardSession>(0, opt_.servers[0], opt_, plan_, who_, clock_,
                                              transport_, shared_);
  }

  void SetUp() override {
    ASSERT_EQ(wire::PayloadLayout(opt_.codec, plan_.fragment(0).numel).chunks(), 3u);
    session_->Connect();
    session_->Tick(false);
    Welcome({});
    Update();
    transport_.sent.clear();
    (void)shared_.TakeArrivals();
  }

  void Welcome(std::vector<wire::HeldTrain> held) {
    auto h = ShardHeader(MsgType::Welcome, plan_, manifest_, who_);
    h.incarnation = 7;
    h.versions.emplace_back(0, 1);
    h.held_trains = std::move(held);
    session_->OnMessage(*BuildMessage(h), /*via_control=*/false);
  }
  void Update() {
    auto h = ShardHeader(MsgType::FragmentUpdate, plan_, manifest_, who_);
    h.version = 1;
    const uint64_t numel = plan_.fragment(0).numel;
    wire::SetPayloadLayout(h, wire::kFragmentCodec, numel);
    session_->OnMessage(*BuildMessage(h, std::make_shared<wire::Bytes>(numel * 4, 0)), false);
  }

  // Push seq 1 sent whole; returns what was sent.
  Sent PushSent() {
    PushJob job;
    job.fragment = 0;
    job.delta = delta_;
    job.seq = 1;
    job.base_version = 1;
    job.tokens = 10;
    job.steps = 1;
    session_->AddPush(std::move(job));
    session_->Tick(false);
    auto sent = transport_.Take(MsgType::Push);
    EXPECT_EQ(sent.size(), 1u);
    return sent.empty() ? Sent{} : std::move(sent[0]);
  }
  // The push's chunk checksums, as the shard saw its chunks declare them.
  std::vector<uint64_t> Sums(const Sent& s) const {
    std::vector<uint64_t> sums;
    for (const auto& f : wire::PayloadFrames(s.payload, opt_.codec, plan_.fragment(0).numel))
      sums.push_back(wire::FrameChecksum(f));
    return sums;
  }
  // The data connection is lost: the session reconnects and says Hello.
  void LoseConnection() {
    const int before = transport_.reconnects;
    transport_.disconnected = true;
    session_->Tick(false);
    EXPECT_EQ(transport_.reconnects, before + 1) << "reconnected at once";
    EXPECT_FALSE(session_->welcomed());
    int hellos = 0;
    for (const Sent& s : transport_.Take(MsgType::Hello)) hellos += !s.control;
    EXPECT_EQ(hellos, 1) << "on the data connection";
    EXPECT_TRUE(transport_.Take(MsgType::Push).empty()) << "nothing before the Welcome";
  }
  uint64_t BytesBefore(uint32_t chunk) const {
    return wire::PayloadLayout(opt_.codec, plan_.fragment(0).numel).chunk(chunk).byte_offset;
  }

  Manifest manifest_;
  Plan plan_;
  SyncOptions opt_;
  SyncShared shared_;
  FakeClock clock_;
  RecordingTransport transport_;
  std::vector<float> delta_;
  WorkerIdentity who_;
  std::unique_ptr<ShardSession> session_;
};

TEST_F(ShardSessionResumeTest, AfterAReconnectOnlyTheChunksTheShardLacksAreSent) {
  const Sent first = PushSent();
  EXPECT_EQ(first.h.chunk_index, 0u);
  const uint64_t size = first.payload->size();
  EXPECT_EQ(shared_.stats().bytes_sent, size);
  LoseConnection();
  const auto sums = Sums(first);
  Welcome({wire::HeldTrain(0, 2, 1, wire::TrainChecksum(sums))});
  auto resumed = transport_.Take(MsgType::Push);
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_EQ(resumed[0].h.seq, 1u);
  EXPECT_EQ(resumed[0].h.chunk_index, 2u) << "sent from the first chunk the shard lacks";
  EXPECT_EQ(resumed[0].payload, first.payload) << "the same bytes";
  EXPECT_EQ(shared_.stats().bytes_sent, size + (size - BytesBefore(2)));
  EXPECT_LT(size - BytesBefore(2), size / 2);
  EXPECT_EQ(shared_.stats().resends, 1u);
  // A later resend (its answer never came) goes whole: the shard's train is complete or gone.
  clock_.Advance(opt_.retry_max + absl::Seconds(1));
  session_->Tick(false);
  auto again = transport_.Take(MsgType::Push);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].h.chunk_index, 0u);
}

TEST_F(ShardSessionResumeTest, AHeldTrainThatIsNotThisPushGetsItWhole) {
  const Sent first = PushSent();
  const auto sums = Sums(first);
  const uint64_t good = wire::TrainChecksum(sums);
  const std::vector<std::vector<wire::HeldTrain>> not_ours = {
      {},                                    // an older shard lists nothing
      {wire::HeldTrain(0, 2, 1, good ^ 1)},  // another payload
      {wire::HeldTrain(0, 2, 2, good)},      // another seq
      {wire::HeldTrain(0, 3, 1, good)},      // as many chunks as the push has
      {wire::HeldTrain(0, 0, 1, good)},      // none
  };
  for (const auto& held : not_ours) {
    LoseConnection();
    Welcome(held);
    auto sent = transport_.Take(MsgType::Push);
    ASSERT_EQ(sent.size(), 1u);
    EXPECT_EQ(sent[0].h.chunk_index, 0u);
  }
}

TEST_F(ShardSessionResumeTest, AResumedSendRefusedTrainNotHeldGoesAgainWholeAtOnce) {
  const Sent first = PushSent();
  LoseConnection();
  Welcome({wire::HeldTrain(0, 1, 1, wire::TrainChecksum(Sums(first)))});
  ASSERT_EQ(transport_.Take(MsgType::Push).at(0).h.chunk_index, 1u);
  // The shard dropped what it held before the resumed chunks came (its time or byte bound).
  auto e = ShardHeader(MsgType::Error, plan_, manifest_, who_);
  e.seq = 1;
  e.error_code = wire::ErrorCode::TrainNotHeld;
  e.refused_type = MsgType::Push;
  session_->OnMessage(*BuildMessage(e), false);
  EXPECT_EQ(session_->unacked(), 1u) << "not given up";
  EXPECT_EQ(shared_.stats().refused, 0u);
  session_->Tick(false);
  auto whole = transport_.Take(MsgType::Push);
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].h.chunk_index, 0u);
}

// theta(0) uploads resume the same way (a held train of seq 0), when the values handed over
// again are the cut upload's: the same bytes, so the same train checksum.
TEST_F(ShardSessionResumeTest, ACutThetaZeroUploadGoesOnFromTheChunksTheShardHeld) {
  const uint64_t numel = plan_.fragment(0).numel;
  auto values = std::make_shared<wire::Bytes>(numel * sizeof(float));
  for (size_t i = 0; i < values->size(); ++i) (*values)[i] = static_cast<uint8_t>(i * 131 + 7);
  std::vector<uint64_t> sums;
  for (const auto& f : wire::PayloadFrames(values, wire::kFragmentCodec, numel))
    sums.push_back(wire::FrameChecksum(f));
  ASSERT_EQ(sums.size(), 3u) << "fp32 chunks of 4 MiB";
  const uint64_t size = values->size();
  const uint64_t before2 = wire::PayloadLayout(wire::kFragmentCodec, numel).chunk(2).byte_offset;

  session_->Init(0, values);
  auto first = transport_.Take(MsgType::InitFragment);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].h.chunk_index, 0u);
  EXPECT_EQ(shared_.stats().init_bytes_sent, size);

  // Held chunks of another payload (the learner trained meanwhile): whole.
  LoseConnection();
  Welcome({wire::HeldTrain(0, 2, 0, wire::TrainChecksum(sums) ^ 1)});
  session_->Init(0, values);
  auto whole = transport_.Take(MsgType::InitFragment);
  ASSERT_EQ(whole.size(), 1u);
  EXPECT_EQ(whole[0].h.chunk_index, 0u);
  EXPECT_EQ(shared_.stats().init_resumed, 0u);

  // This upload's first two chunks held: only the third goes.
  LoseConnection();
  Welcome({wire::HeldTrain(0, 2, 0, wire::TrainChecksum(sums))});
  EXPECT_TRUE(transport_.Take(MsgType::InitFragment).empty())
      << "theta(0) goes when the training thread hands it over, not at the Welcome";
  session_->Init(0, values);
  auto resumed = transport_.Take(MsgType::InitFragment);
  ASSERT_EQ(resumed.size(), 1u);
  EXPECT_EQ(resumed[0].h.chunk_index, 2u);
  EXPECT_EQ(resumed[0].payload, values) << "the same bytes";
  EXPECT_EQ(shared_.stats().init_resumed, 1u);
  EXPECT_EQ(shared_.stats().init_bytes_sent, 2 * size + (size - before2));
  EXPECT_LT(size - before2, size / 2);
  EXPECT_TRUE(transport_.Take(MsgType::Push).empty()) << "a held upload is not a push";

  // Once used, the held train is forgotten: the next upload (answered TrainNotHeld, say) goes
  // whole.
  session_->Init(0, values);
  auto again = transport_.Take(MsgType::InitFragment);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].h.chunk_index, 0u);
}

}  // namespace
}  // namespace diloco::worker
