// A catalogue of corrupt and hostile messages, one short test each (after LevelDB's
// log_test): every one is refused with its error code and leaves the Shard's state unchanged
// (docs/architecture.md, "Invariants", 5).
#include <gtest/gtest.h>

#include <cstring>

#include "tests/server/shard_harness.h"

namespace diloco::server::testing {
namespace {

using wire::AckStatus;
using wire::ErrorCode;
using wire::MsgType;

// What a bad message must not touch.
struct State {
  std::vector<uint64_t> versions;
  std::vector<std::vector<float>> params;
  uint64_t rounds = 0, queued = 0, duplicate = 0, stale = 0;
  bool operator==(const State&) const = default;
};

class CorruptionTest : public ::testing::Test {
 protected:
  CorruptionTest() : h_(TinyOptions()) {}

  void SetUp() override {
    h_.Hello("a", 1);
    ASSERT_NE(Only(h_.Init("a", 1, 0, Values(0.5f)), MsgType::PushAck), nullptr);
    h_.Tick();
    before_ = Snap();
    bad_before_ = h_.shard().counters().messages_bad;
  }

  std::vector<float> Values(float v) const { return std::vector<float>(h_.fragment(0).numel, v); }

  State Snap() {
    State s;
    for (uint32_t id : h_.shard().owned()) {
      s.versions.push_back(h_.shard().published_version(id));
      s.params.push_back(h_.shard().params(id));
    }
    const auto& c = h_.shard().counters();
    s.rounds = c.rounds;
    s.queued = c.pushes_queued;
    s.duplicate = c.pushes_duplicate;
    s.stale = c.pushes_stale;
    return s;
  }

  wire::HeaderFields PushHeader(uint64_t seq = 1) const {
    return h_.PushFields(1, 0, seq, 1, h_.fragment(0).numel);
  }
  std::vector<zmq::message_t> Push(const wire::HeaderFields& hf) const {
    return ShardHarness::Frames(
        hf, ShardHarness::Encode({kernels::CodecKind::kFp32, 256}, Values(0.25f)));
  }

  // One Error reply with `code`, one more bad message counted, and, after any round could have
  // closed, the same state as before.
  void ExpectRefused(const std::vector<Outgoing>& out, ErrorCode code) {
    const Outgoing* e = Only(out, MsgType::Error);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->header.error_code, code)
        << wire::EnumNameErrorCode(e->header.error_code) << ": " << e->header.message;
    EXPECT_EQ(h_.shard().counters().messages_bad, bad_before_ + 1);
    ExpectUnchanged();
  }
  void ExpectUnchanged() {
    h_.clock().Advance(absl::Seconds(30));
    h_.Tick();
    EXPECT_TRUE(Snap() == before_) << "a refused message changed the shard's state";
  }

  ShardHarness h_;
  State before_;
  uint64_t bad_before_ = 0;
};

TEST_F(CorruptionTest, TruncatedHeader) {
  auto f = Push(PushHeader());
  f[0] = zmq::message_t(f[0].data(), f[0].size() / 2);
  ExpectRefused(h_.SendRaw("a", std::move(f)), ErrorCode::Malformed);
}

TEST_F(CorruptionTest, OversizedHeader) {
  auto hf = PushHeader();
  hf.message.assign(wire::Limits{}.max_header_bytes, 'x');  // a valid FlatBuffer, too big
  ExpectRefused(h_.SendRaw("a", Push(hf)), ErrorCode::Malformed);
}

// The verifier cases are resealed (the trailer made to match): unsealed, the header checksum
// refuses them first (FlippedHeaderBit).
TEST_F(CorruptionTest, BadVerifierOffsets) {
  auto f = Push(PushHeader());
  const uint32_t root = 0x7ffffff0;  // root table far outside the frame
  std::memcpy(f[0].data(), &root, 4);
  wire::ResealHeaderFrame(f[0]);
  ExpectRefused(h_.SendRaw("a", std::move(f)), ErrorCode::Malformed);
}

TEST_F(CorruptionTest, BadVtableOffset) {
  auto f = Push(PushHeader());
  uint32_t root;
  std::memcpy(&root, f[0].data(), 4);
  const int32_t vtable = -0x4000000;  // the root table's vtable outside the frame
  std::memcpy(f[0].data<uint8_t>() + root, &vtable, 4);
  wire::ResealHeaderFrame(f[0]);
  ExpectRefused(h_.SendRaw("a", std::move(f)), ErrorCode::Malformed);
}

// A push whose header lost a bit of its seq on the way (seq 1 read as 3) is refused BadChecksum
// naming no message and never applied; the worker's resend of the same push is applied once,
// and a resend after that is a Duplicate.
TEST_F(CorruptionTest, FlippedHeaderBit) {
  auto f = Push(PushHeader(1));
  const auto* table =
      reinterpret_cast<const flatbuffers::Table*>(wire::GetHeader(f[0].data<uint8_t>()));
  const auto at = table->GetOptionalFieldOffset(wire::Header::VT_SEQ);
  ASSERT_NE(at, 0);
  const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(table))[at] ^= 0x02;
  const auto out = h_.SendRaw("a", std::move(f));
  ExpectRefused(out, ErrorCode::BadChecksum);
  const Outgoing* e = Only(out, MsgType::Error);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->header.refused_type, MsgType::Invalid);
  EXPECT_EQ(e->header.worker_id, 0u);
  EXPECT_EQ(e->header.fragment_id, 0u);
  EXPECT_EQ(e->header.seq, 0u);
  EXPECT_NE(e->header.message.find("header fails its checksum"), std::string::npos);
  EXPECT_EQ(h_.shard().counters().refused_by_reason[static_cast<size_t>(ErrorCode::BadChecksum)],
            1u);

  const auto resent = h_.SendRaw("a", Push(PushHeader(1)));  // Only() points into it
  const Outgoing* ack = Only(resent, MsgType::PushAck);
  ASSERT_NE(ack, nullptr);
  EXPECT_EQ(ack->header.ack, AckStatus::Queued);
  EXPECT_EQ(ack->header.seq, 1u);
  h_.clock().Advance(absl::Seconds(30));
  h_.Tick();
  EXPECT_EQ(h_.shard().published_version(0), before_.versions[0] + 1) << "applied once";
  EXPECT_EQ(h_.shard().counters().rounds, before_.rounds + 1);
  const auto resent_again = h_.SendRaw("a", Push(PushHeader(1)));
  const Outgoing* again = Only(resent_again, MsgType::PushAck);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->header.ack, AckStatus::Duplicate);
  h_.clock().Advance(absl::Seconds(30));
  h_.Tick();
  EXPECT_EQ(h_.shard().published_version(0), before_.versions[0] + 1) << "applied twice";
}

TEST_F(CorruptionTest, WrongFrameCount) {
  auto f = Push(PushHeader());
  f.pop_back();
  ExpectRefused(h_.SendRaw("a", std::move(f)), ErrorCode::BadLength);
}

TEST_F(CorruptionTest, TooManyFrames) {
  std::vector<zmq::message_t> p(wire::Limits{}.max_payload_frames + 1);
  std::vector<zmq::message_t> f;
  f.push_back(wire::BuildHeader(PushHeader(), p));
  for (auto& m : p) f.push_back(std::move(m));
  ExpectRefused(h_.SendRaw("a", std::move(f)), ErrorCode::Malformed);
}

TEST_F(CorruptionTest, LengthMismatch) {
  auto f = Push(PushHeader());
  f[1] = zmq::message_t(f[1].data(), f[1].size() - 1);
  ExpectRefused(h_.SendRaw("a", std::move(f)), ErrorCode::BadLength);
}

TEST_F(CorruptionTest, ChecksumMismatch) {
  auto f = Push(PushHeader());
  f[1].data<uint8_t>()[f[1].size() / 2] ^= 0x40;
  ExpectRefused(h_.SendRaw("a", std::move(f)), ErrorCode::BadChecksum);
}

TEST_F(CorruptionTest, UnknownMessageType) {
  auto hf = PushHeader();
  hf.type = static_cast<MsgType>(77);
  ExpectRefused(h_.SendRaw("a", Push(hf)), ErrorCode::UnknownType);
}

TEST_F(CorruptionTest, ServerOnlyMessageType) {
  auto hf = PushHeader();
  hf.type = MsgType::Welcome;
  ExpectRefused(h_.SendRaw("a", Push(hf)), ErrorCode::UnknownType);
}

TEST_F(CorruptionTest, OutOfRangeEnumField) {
  auto hf = PushHeader();
  hf.ack = static_cast<AckStatus>(200);
  ExpectRefused(h_.SendRaw("a", Push(hf)), ErrorCode::Malformed);
}

TEST_F(CorruptionTest, WrongProtocolVersion) {
  // BuildHeader always writes kProtocolVersion: a peer of another version builds its own.
  flatbuffers::FlatBufferBuilder fbb;
  const uint64_t none[1] = {};
  auto lv = fbb.CreateVector(none, 0), cv = fbb.CreateVector(none, 0);
  wire::HeaderBuilder b(fbb);
  b.add_protocol_version(wire::kProtocolVersion + 1);
  b.add_type(MsgType::Hello);
  b.add_plan_fingerprint(h_.shard().plan_fingerprint());
  b.add_worker_id(1);
  b.add_frame_lengths(lv);
  b.add_frame_checksums(cv);
  fbb.Finish(b.Finish());
  std::vector<zmq::message_t> f;
  f.emplace_back(fbb.GetBufferPointer(), fbb.GetSize());
  ExpectRefused(h_.SendRaw("a", std::move(f)), ErrorCode::BadProtocolVersion);
}

TEST_F(CorruptionTest, WrongPlan) {
  auto hf = PushHeader();
  hf.plan_fingerprint ^= 1;
  ExpectRefused(h_.SendRaw("a", Push(hf)), ErrorCode::WrongPlan);
}

TEST_F(CorruptionTest, WrongIdentity) {
  h_.Hello("b", 2);
  auto hf = PushHeader();
  hf.worker_id = 2;  // sent on worker 1's connection
  ExpectRefused(h_.SendRaw("a", Push(hf)), ErrorCode::BadIdentity);
}

TEST_F(CorruptionTest, NoHelloOnThisConnection) {
  ExpectRefused(h_.SendRaw("stranger", Push(PushHeader())), ErrorCode::BadIdentity);
}

TEST_F(CorruptionTest, SupersededGeneration) {
  h_.Hello("a2", 1, /*gen=*/2);  // worker 1 restarted elsewhere
  auto hf = PushHeader();
  hf.generation = 1;
  ExpectRefused(h_.SendRaw("a2", Push(hf)), ErrorCode::BadIdentity);
}

TEST_F(CorruptionTest, ReplayedSequenceNumber) {
  ASSERT_EQ(Only(h_.SendRaw("a", Push(PushHeader(7))), MsgType::PushAck)->header.ack,
            AckStatus::Queued);
  h_.clock().Advance(absl::Seconds(30));
  h_.Tick();  // the round closes and is published: version 2
  before_ = Snap();
  ASSERT_EQ(before_.versions[0], 2u);
  const auto replies = h_.SendRaw("a", Push(PushHeader(7)));
  const Outgoing* ack = Only(replies, MsgType::PushAck);
  ASSERT_NE(ack, nullptr);
  EXPECT_EQ(ack->header.ack, AckStatus::Duplicate);
  before_.duplicate += 1;  // the one counter a replay moves
  ExpectUnchanged();
}

}  // namespace
}  // namespace diloco::server::testing
