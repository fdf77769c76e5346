// The header checksum (protocol version 3, schema/wire.h step 3): a bit flipped anywhere in a
// header frame is refused BadChecksum before any field is read, so the refusal names no
// message; the flipped field would otherwise have made another valid message; a peer of an
// older version (no trailer) is told BadProtocolVersion, and never a damaged header of this one.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "schema/wire.h"
#include "tests/schema/frames.h"

namespace diloco::wire {
namespace {

using testing::Frames;

// Every field away from its default, so that each is stored in the frame and can be hit.
HeaderFields Full() {
  HeaderFields h;
  h.type = MsgType::Push;
  h.plan_fingerprint = 0x1122334455667788;
  h.model_fingerprint = 0x8877665544332211;
  h.worker_id = 5;
  h.generation = 1700000000000000;
  h.seq = 41;
  h.shard = 2;
  h.incarnation = 77;
  h.fragment_id = 6;
  h.base_version = 12;
  h.version = 13;
  h.round = 14;
  h.tokens = 65536;
  h.steps = 64;
  h.codec = 3;
  h.block = 256;
  h.num_elements = 7;
  h.chunk_elements = 1 << 20;
  h.ack = AckStatus::Stale;
  h.error_code = ErrorCode::NoCredit;
  h.message = "a message";
  h.versions = {FragmentVersion(6, 13)};
  h.step_time_us = 1500;
  h.fleet_step_time_us = 1400;
  h.channel = Channel::Control;
  h.credit_bytes = 1 << 30;
  h.refused_type = MsgType::Pull;
  h.values_checksum = 0xabcdef;
  return h;
}

std::vector<zmq::message_t> WithHeader(const std::string& header, const std::string& payload) {
  std::vector<zmq::message_t> f;
  f.emplace_back(header.data(), header.size());
  f.emplace_back(payload.data(), payload.size());
  return f;
}

// A header built as a peer of protocol `version` builds it: the FlatBuffers bytes alone (before
// version 3 there was no trailer), or sealed.
zmq::message_t PeerHeader(uint16_t version, bool sealed) {
  flatbuffers::FlatBufferBuilder fbb;
  const uint64_t none[1] = {};
  auto lv = fbb.CreateVector(none, 0), cv = fbb.CreateVector(none, 0);
  HeaderBuilder b(fbb);
  b.add_protocol_version(version);
  b.add_type(MsgType::Hello);
  b.add_worker_id(4);
  b.add_seq(9);
  b.add_frame_lengths(lv);
  b.add_frame_checksums(cv);
  fbb.Finish(b.Finish());
  if (sealed) return SealHeader(fbb.GetBufferPointer(), fbb.GetSize());
  return zmq::message_t(fbb.GetBufferPointer(), fbb.GetSize());
}

TEST(HeaderChecksumTest, EveryBitFlippedAnywhereIsRefusedBeforeAnyFieldIsRead) {
  const std::string payload = "payload bytes";
  const auto good = Frames(Full(), {payload});
  const std::string header(good[0].data<char>(), good[0].size());
  ASSERT_TRUE(ParseMessage(WithHeader(header, payload)).ok());
  int refused = 0;
  for (size_t i = 0; i < header.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string damaged = header;
      damaged[i] = static_cast<char>(damaged[i] ^ (1 << bit));
      MessageIds ids;
      auto m = ParseMessage(WithHeader(damaged, payload), {}, &ids);
      ASSERT_EQ(ErrorCodeOf(m.status()), ErrorCode::BadChecksum)
          << "byte " << i << " of " << header.size() << ", bit " << bit << ": " << m.status();
      EXPECT_NE(m.status().message().find("header fails its checksum"), absl::string_view::npos)
          << m.status();
      // Nothing of it was read: the refusal names no worker, fragment, seq or type.
      ASSERT_EQ(ids.worker, 0u);
      ASSERT_EQ(ids.fragment, 0u);
      ASSERT_EQ(ids.seq, 0u);
      ASSERT_EQ(ids.type, MsgType::Invalid);
      // The header-only path (the server's CURVE identity check) refuses it the same way.
      zmq::message_t frame(damaged.data(), damaged.size());
      ASSERT_EQ(ErrorCodeOf(VerifyHeaderFrame(frame).status()), ErrorCode::BadChecksum);
      ++refused;
    }
  }
  EXPECT_EQ(refused, static_cast<int>(8 * header.size()));
}

// Why the checksum is needed: a flip in a field's bytes, with the trailer made to match again
// (what a header without a checksum of its own amounted to), is another valid message.
TEST(HeaderChecksumTest, AFlippedFieldWouldOtherwiseBeAnotherValidMessage) {
  const std::string payload = "payload bytes";
  auto frames = Frames(Full(), {payload});
  const auto* table = reinterpret_cast<const flatbuffers::Table*>(GetHeader(frames[0].data()));
  for (const auto field : {Header::VT_SEQ, Header::VT_FRAGMENT_ID, Header::VT_TOKENS,
                           Header::VT_STEPS, Header::VT_BASE_VERSION, Header::VT_WORKER_ID}) {
    const auto at = table->GetOptionalFieldOffset(field);
    ASSERT_NE(at, 0) << "field " << field << " not stored";
    const size_t offset = reinterpret_cast<const uint8_t*>(table) + at -
                          static_cast<const uint8_t*>(frames[0].data());
    std::string damaged(frames[0].data<char>(), frames[0].size());
    damaged[offset] = static_cast<char>(damaged[offset] ^ 0x01);
    EXPECT_EQ(ErrorCodeOf(ParseMessage(WithHeader(damaged, payload)).status()),
              ErrorCode::BadChecksum)
        << "field " << field;
    auto resealed = WithHeader(damaged, payload);
    ResealHeaderFrame(resealed[0]);
    auto m = ParseMessage(std::move(resealed));
    ASSERT_TRUE(m.ok()) << "field " << field << ": " << m.status();
    const Header& h = m->header();
    const HeaderFields f = Full();
    EXPECT_TRUE(h.seq() != f.seq || h.fragment_id() != f.fragment_id || h.tokens() != f.tokens ||
                h.steps() != f.steps || h.base_version() != f.base_version ||
                h.worker_id() != f.worker_id)
        << "field " << field << ": the flip changed nothing";
  }
}

// A peer of an older version sends no trailer: it is told its version, not BadChecksum, and a
// future peer's sealed header likewise; bytes that are no Header at all stay Malformed.
TEST(HeaderChecksumTest, AnOlderPeerIsToldItsVersion) {
  for (uint16_t version : {0, 1, 2}) {
    std::vector<zmq::message_t> f;
    f.push_back(PeerHeader(version, /*sealed=*/false));
    MessageIds ids;
    auto m = ParseMessage(std::move(f), {}, &ids);
    EXPECT_EQ(ErrorCodeOf(m.status()), ErrorCode::BadProtocolVersion)
        << "version " << version << ": " << m.status();
    EXPECT_NE(m.status().message().find(
                  absl::StrCat("protocol version ", version, ", expected ", kProtocolVersion)),
              absl::string_view::npos)
        << m.status();
    EXPECT_EQ(ids.type, MsgType::Invalid);
  }
  std::vector<zmq::message_t> future;
  future.push_back(PeerHeader(kProtocolVersion + 1, /*sealed=*/true));
  EXPECT_EQ(ErrorCodeOf(ParseMessage(std::move(future)).status()), ErrorCode::BadProtocolVersion);
  // This version's header without its trailer is damage, not another version.
  std::vector<zmq::message_t> unsealed;
  unsealed.push_back(PeerHeader(kProtocolVersion, /*sealed=*/false));
  EXPECT_EQ(ErrorCodeOf(ParseMessage(std::move(unsealed)).status()), ErrorCode::BadChecksum);
  const std::string noise(40, 'n');
  std::vector<zmq::message_t> garbage;
  garbage.emplace_back(noise.data(), noise.size());
  EXPECT_EQ(ErrorCodeOf(ParseMessage(std::move(garbage)).status()), ErrorCode::Malformed);
}

// A header altered on purpose and resealed reaches the checks behind the checksum, as the
// corruption catalogue and the fuzzer rely on.
TEST(HeaderChecksumTest, AResealedAlterationReachesTheVerifier) {
  auto f = Frames(Full(), {"abc"});
  const uint32_t root = 0x7ffffff0;  // the root table far outside the frame
  std::memcpy(f[0].data(), &root, 4);
  zmq::message_t copy(f[0].data(), f[0].size());
  EXPECT_EQ(ErrorCodeOf(VerifyHeaderFrame(copy).status()), ErrorCode::BadChecksum);
  ResealHeaderFrame(f[0]);
  auto m = ParseMessage(std::move(f));
  EXPECT_EQ(ErrorCodeOf(m.status()), ErrorCode::Malformed);
  EXPECT_NE(m.status().message().find("verifier"), absl::string_view::npos) << m.status();
}

}  // namespace
}  // namespace diloco::wire
