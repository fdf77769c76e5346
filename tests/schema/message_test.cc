// The message layer alone: round trips, the validation steps in their order, alignment of what
// libzmq hands out, enum ranges, and a burst of random frames.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "schema/transport.h"
#include "schema/wire.h"
#include "tests/schema/frames.h"

namespace diloco::wire {
namespace {

using testing::Frames;

HeaderFields Sample() {
  HeaderFields h;
  h.type = MsgType::Push;
  h.plan_fingerprint = 0x1234;
  h.worker_id = 9;
  h.seq = 42;
  h.message = "hello";
  h.versions = {FragmentVersion(3, 17)};
  return h;
}

bool Aligned8(const void* p) { return reinterpret_cast<uintptr_t>(p) % 8 == 0; }

TEST(MessageTest, RoundTrip) {
  auto m = ParseMessage(Frames(Sample(), {"abc", std::string(5000, 'z')}));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->type(), MsgType::Push);
  EXPECT_EQ(m->header().worker_id(), 9u);
  EXPECT_EQ(m->header().seq(), 42u);
  EXPECT_EQ(m->header().message()->str(), "hello");
  EXPECT_EQ(m->header().versions()->Get(0)->version(), 17u);
  ASSERT_EQ(m->num_payloads(), 2u);
  EXPECT_EQ(m->payload_bytes(), 5003u);
  EXPECT_EQ(std::memcmp(m->payload(0).data(), "abc", 3), 0);
}

TEST(MessageTest, ProtocolVersionIsFieldZeroForever) {
  // Any version's header can be read far enough to say "wrong version" (docs/protocol.md).
  static_assert(Header::VT_PROTOCOL_VERSION == 4);
}

TEST(MessageTest, MisalignedFramesAreCopiedNotReadInPlace) {
  // libzmq hands small frames out at any offset of its receive buffer.
  auto f = Frames(Sample(), {std::string(100, 'p')});
  std::vector<uint8_t> hbuf(f[0].size() + 1), pbuf(f[1].size() + 3);
  std::memcpy(hbuf.data() + 1, f[0].data(), f[0].size());
  std::memcpy(pbuf.data() + 3, f[1].data(), f[1].size());
  std::vector<zmq::message_t> odd;
  odd.push_back(BorrowedFrame(hbuf.data() + 1, f[0].size()));
  odd.push_back(BorrowedFrame(pbuf.data() + 3, f[1].size()));
  ASSERT_FALSE(Aligned8(odd[0].data()));
  auto m = ParseMessage(std::move(odd));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(Aligned8(m->header().frame_lengths()->data()));
  EXPECT_TRUE(Aligned8(m->payload(0).data()));
  EXPECT_EQ(m->header().seq(), 42u);
}

TEST(MessageTest, NoFramesIsMalformed) {
  EXPECT_EQ(ErrorCodeOf(ParseMessage({}).status()), ErrorCode::Malformed);
}

TEST(MessageTest, HeaderCapComesBeforeTheVerifier) {
  auto f = Frames(Sample(), {});
  Limits tight;
  tight.max_header_bytes = f[0].size() - 1;
  EXPECT_EQ(ErrorCodeOf(ParseMessage(std::move(f), tight).status()), ErrorCode::Malformed);
  // A huge non-FlatBuffer is refused by size alone (FlatBuffers would assert on > 2 GiB).
  std::vector<zmq::message_t> big;
  big.emplace_back(size_t{1} << 20);
  EXPECT_EQ(ErrorCodeOf(ParseMessage(std::move(big)).status()), ErrorCode::Malformed);
}

TEST(MessageTest, FrameCapComesBeforeTheHeader) {
  Limits tight;
  tight.max_payload_frames = 2;
  std::vector<zmq::message_t> f(4);  // garbage header: the count alone refuses it
  EXPECT_EQ(ErrorCodeOf(ParseMessage(std::move(f), tight).status()), ErrorCode::Malformed);
}

TEST(MessageTest, ProtocolVersionComesBeforeLengthsAndChecksums) {
  flatbuffers::FlatBufferBuilder fbb;
  const uint64_t one[1] = {99};
  auto lv = fbb.CreateVector(one, 1), cv = fbb.CreateVector(one, 1);
  HeaderBuilder b(fbb);
  b.add_protocol_version(kProtocolVersion + 1);
  b.add_type(MsgType::Push);
  b.add_frame_lengths(lv);
  b.add_frame_checksums(cv);
  fbb.Finish(b.Finish());
  std::vector<zmq::message_t> f;
  f.emplace_back(fbb.GetBufferPointer(), fbb.GetSize());
  f.emplace_back(3);  // neither 99 bytes long nor with checksum 99
  EXPECT_EQ(ErrorCodeOf(ParseMessage(std::move(f)).status()), ErrorCode::BadProtocolVersion);
}

TEST(MessageTest, EnumsOutOfRange) {
  auto h = Sample();
  h.type = MsgType::Invalid;
  EXPECT_EQ(ErrorCodeOf(ParseMessage(Frames(h, {})).status()), ErrorCode::UnknownType);
  h.type = static_cast<MsgType>(250);
  EXPECT_EQ(ErrorCodeOf(ParseMessage(Frames(h, {})).status()), ErrorCode::UnknownType);
  h = Sample();
  h.ack = static_cast<AckStatus>(6);
  EXPECT_EQ(ErrorCodeOf(ParseMessage(Frames(h, {})).status()), ErrorCode::Malformed);
  h = Sample();
  h.error_code = static_cast<ErrorCode>(999);
  EXPECT_EQ(ErrorCodeOf(ParseMessage(Frames(h, {})).status()), ErrorCode::Malformed);
  h = Sample();
  h.channel = static_cast<Channel>(2);
  EXPECT_EQ(ErrorCodeOf(ParseMessage(Frames(h, {})).status()), ErrorCode::Malformed);
  h.channel = Channel::Control;
  auto m = ParseMessage(Frames(h, {}));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->header().channel(), Channel::Control);
}

TEST(MessageTest, OversizedPayloadFrame) {
  Limits tight;
  tight.max_frame_bytes = 10;
  EXPECT_EQ(ErrorCodeOf(ParseMessage(Frames(Sample(), {std::string(11, 'a')}), tight).status()),
            ErrorCode::BadLength);
}

TEST(MessageTest, VerifyHeaderFrameSkipsPayloads) {
  auto f = Frames(Sample(), {"abc"});
  auto h = VerifyHeaderFrame(f[0]);
  ASSERT_TRUE(h.ok()) << h.status();
  EXPECT_EQ((*h)->worker_id(), 9u);
}

TEST(MessageTest, PrecomputedChecksumsMatch) {
  std::vector<zmq::message_t> p;
  p.emplace_back("abcd", 4);
  const uint64_t len[] = {4}, sum[] = {FrameChecksum(p[0])};
  std::vector<zmq::message_t> f;
  f.push_back(BuildHeader(Sample(), len, sum));
  f.push_back(std::move(p[0]));
  EXPECT_TRUE(ParseMessage(std::move(f)).ok());
}

TEST(MessageTest, ErrorCodesCarryRetryAdvice) {
  EXPECT_TRUE(absl::IsUnavailable(WireError(ErrorCode::Unavailable, "")));
  EXPECT_TRUE(absl::IsFailedPrecondition(WireError(ErrorCode::WrongPlan, "")));
  EXPECT_TRUE(absl::IsPermissionDenied(WireError(ErrorCode::BadIdentity, "")));
  EXPECT_TRUE(absl::IsInvalidArgument(WireError(ErrorCode::BadChecksum, "")));
  EXPECT_EQ(ErrorCodeOf(WireError(ErrorCode::BadChecksum, "x")), ErrorCode::BadChecksum);
  EXPECT_EQ(ErrorCodeOf(absl::InternalError("no payload")), ErrorCode::Internal);
}

TEST(MessageTest, RandomFramesNeverCrash) {
  std::mt19937_64 rng(7);
  const auto valid = Frames(Sample(), {"abc"});
  int accepted = 0;
  for (int i = 0; i < 3000; ++i) {
    std::vector<zmq::message_t> f;
    // Start from a valid header and flip a few bytes, or from pure noise.
    std::string h(valid[0].data<char>(), valid[0].size());
    if (i % 2) h.assign(rng() % 300, '\0');
    for (int k = 0; k < 1 + static_cast<int>(rng() % 4); ++k)
      if (!h.empty()) h[rng() % h.size()] = static_cast<char>(rng());
    f.emplace_back(h.data(), h.size());
    for (uint64_t n = rng() % 3; n > 0; --n) f.emplace_back(rng() % 16);
    auto m = ParseMessage(std::move(f));
    if (m.ok()) {
      ++accepted;
      (void)MsgTypeName(m->type());
      (void)EnumNameAckStatus(m->header().ack());
      if (m->header().message()) (void)m->header().message()->str();
    }
  }
  EXPECT_LT(accepted, 3000);
}

}  // namespace
}  // namespace diloco::wire
