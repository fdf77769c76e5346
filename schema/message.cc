#include <cstring>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "schema/wire.h"

namespace diloco::wire {
namespace {

constexpr char kErrorCodeUrl[] = "diloco.wire/ErrorCode";

}  // namespace

absl::Status WireError(ErrorCode code, absl::string_view what) {
  absl::StatusCode sc = absl::StatusCode::kInvalidArgument;
  switch (code) {
    case ErrorCode::WrongPlan:
    case ErrorCode::WrongModel:
    case ErrorCode::NotInitialized:
      sc = absl::StatusCode::kFailedPrecondition;
      break;
    case ErrorCode::BadIdentity:
      sc = absl::StatusCode::kPermissionDenied;
      break;
    case ErrorCode::Unavailable:
      sc = absl::StatusCode::kUnavailable;
      break;
    case ErrorCode::Internal:
      sc = absl::StatusCode::kInternal;
      break;
    default:
      break;
  }
  absl::Status s(sc, absl::StrCat(EnumNameErrorCode(code), ": ", what));
  uint16_t raw = static_cast<uint16_t>(code);
  s.SetPayload(kErrorCodeUrl, absl::Cord(absl::string_view(reinterpret_cast<char*>(&raw), 2)));
  return s;
}

ErrorCode ErrorCodeOf(const absl::Status& s) {
  if (s.ok()) return ErrorCode::None;
  auto p = s.GetPayload(kErrorCodeUrl);
  if (!p || p->size() != 2) return ErrorCode::Internal;
  uint16_t raw = 0;
  std::string bytes(*p);
  std::memcpy(&raw, bytes.data(), 2);
  return static_cast<ErrorCode>(raw);
}

zmq::message_t BuildHeader(const HeaderFields& h, std::span<const zmq::message_t> payloads) {
  flatbuffers::FlatBufferBuilder fbb(256 + h.message.size() + 16 * payloads.size() +
                                     16 * h.versions.size());
  std::vector<uint64_t> lengths, sums;
  lengths.reserve(payloads.size());
  sums.reserve(payloads.size());
  for (const auto& p : payloads) {
    lengths.push_back(p.size());
    sums.push_back(Checksum64(p.data(), p.size()));
  }
  auto lv = fbb.CreateVector(lengths);
  auto cv = fbb.CreateVector(sums);
  auto mv = h.message.empty() ? 0 : fbb.CreateString(h.message);
  auto vv = h.versions.empty() ? 0 : fbb.CreateVectorOfStructs(h.versions);
  HeaderBuilder b(fbb);
  b.add_protocol_version(kProtocolVersion);
  b.add_type(h.type);
  b.add_plan_fingerprint(h.plan_fingerprint);
  b.add_model_fingerprint(h.model_fingerprint);
  b.add_worker_id(h.worker_id);
  b.add_generation(h.generation);
  b.add_seq(h.seq);
  b.add_shard(h.shard);
  b.add_incarnation(h.incarnation);
  b.add_fragment_id(h.fragment_id);
  b.add_base_version(h.base_version);
  b.add_version(h.version);
  b.add_round(h.round);
  b.add_tokens(h.tokens);
  b.add_steps(h.steps);
  b.add_codec(h.codec);
  b.add_block(h.block);
  b.add_num_elements(h.num_elements);
  b.add_chunk_elements(h.chunk_elements);
  b.add_frame_lengths(lv);
  b.add_frame_checksums(cv);
  b.add_ack(h.ack);
  b.add_error_code(h.error_code);
  if (!h.message.empty()) b.add_message(mv);
  if (!h.versions.empty()) b.add_versions(vv);
  b.add_step_time_us(h.step_time_us);
  b.add_fleet_step_time_us(h.fleet_step_time_us);
  fbb.Finish(b.Finish());
  return zmq::message_t(fbb.GetBufferPointer(), fbb.GetSize());
}

uint64_t Message::payload_bytes() const {
  uint64_t n = 0;
  for (size_t i = 1; i < frames_.size(); ++i) n += frames_[i].size();
  return n;
}

absl::StatusOr<Message> ParseMessage(std::vector<zmq::message_t> frames, const Limits& limits) {
  if (frames.empty()) return WireError(ErrorCode::Malformed, "no frames");
  if (frames.size() - 1 > limits.max_payload_frames)
    return WireError(ErrorCode::Malformed, absl::StrCat(frames.size() - 1, " payload frames"));
  const auto& hf = frames[0];
  if (hf.size() > limits.max_header_bytes)
    return WireError(ErrorCode::Malformed,
                     absl::StrCat("header of ", hf.size(), " bytes exceeds the cap of ",
                                  limits.max_header_bytes));
  if (hf.size() < 8) return WireError(ErrorCode::Malformed, "header too short");
  // The verifier also checks alignment: a misaligned buffer is refused, never read.
  flatbuffers::Verifier::Options vo;
  vo.max_depth = 8;
  vo.max_tables = 64;
  flatbuffers::Verifier verifier(static_cast<const uint8_t*>(hf.data()), hf.size(), vo);
  if (!verifier.VerifyBuffer<Header>(nullptr))
    return WireError(ErrorCode::Malformed, "header fails the FlatBuffers verifier");
  const Header* h = GetHeader(hf.data());
  if (h->protocol_version() != kProtocolVersion)
    return WireError(ErrorCode::BadProtocolVersion,
                     absl::StrCat("protocol version ", h->protocol_version(), ", expected ",
                                  kProtocolVersion));
  if (h->type() == MsgType::Invalid || h->type() > MsgType::MAX)
    return WireError(ErrorCode::UnknownType,
                     absl::StrCat("message type ", static_cast<int>(h->type())));
  const size_t np = frames.size() - 1;
  const auto* lens = h->frame_lengths();
  const auto* sums = h->frame_checksums();
  const size_t nl = lens ? lens->size() : 0, ns = sums ? sums->size() : 0;
  if (nl != np || ns != np)
    return WireError(ErrorCode::BadLength, absl::StrCat("header declares ", nl, " lengths and ",
                                                        ns, " checksums for ", np, " frames"));
  for (size_t i = 0; i < np; ++i) {
    const auto& f = frames[i + 1];
    if (f.size() > limits.max_frame_bytes)
      return WireError(ErrorCode::BadLength, absl::StrCat("frame ", i, " exceeds the cap"));
    if (lens->Get(i) != f.size())
      return WireError(ErrorCode::BadLength, absl::StrCat("frame ", i, " declared ", lens->Get(i),
                                                          " bytes, got ", f.size()));
  }
  for (size_t i = 0; i < np; ++i) {
    const auto& f = frames[i + 1];
    if (Checksum64(f.data(), f.size()) != sums->Get(i))
      return WireError(ErrorCode::BadChecksum, absl::StrCat("frame ", i, " checksum mismatch"));
  }
  Message m;
  m.frames_ = std::move(frames);
  m.header_ = GetHeader(m.frames_[0].data());
  return m;
}

const char* MsgTypeName(MsgType t) { return EnumNameMsgType(t); }

}  // namespace diloco::wire
