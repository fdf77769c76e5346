#include <algorithm>
#include <cstdint>
#include <cstring>
#include <new>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "schema/wire.h"

namespace diloco::wire {
namespace {

constexpr char kErrorCodeUrl[] = "diloco.wire/ErrorCode";

constexpr std::align_val_t kCopyAlignment{64};

bool Aligned(const zmq::message_t& f) {
  return f.size() == 0 || reinterpret_cast<uintptr_t>(f.data()) % kHeaderAlignment == 0;
}

template <typename V>
bool ElementsAligned(const V* v) {
  return v == nullptr || v->size() == 0 ||
         reinterpret_cast<uintptr_t>(v->Data()) % kHeaderAlignment == 0;
}

void FreeAligned(void* data, void* /*hint*/) { ::operator delete(data, kCopyAlignment); }

// A copy of `f` in storage of our own, cache-line aligned whatever libzmq's internals do.
zmq::message_t AlignedCopy(const zmq::message_t& f) {
  void* p = ::operator new(f.size(), kCopyAlignment);
  std::memcpy(p, f.data(), f.size());
  return zmq::message_t(p, f.size(), &FreeAligned, nullptr);
}

void StoreLittleEndian(uint64_t v, uint8_t* out) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<uint8_t>(v >> (8 * i));
}

uint64_t LoadLittleEndian(const uint8_t* in) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | in[i];
  return v;
}

// Writes the trailer over the last kHeaderTrailerBytes of a frame of `size` bytes.
void WriteTrailer(uint8_t* frame, size_t size) {
  uint8_t* magic = frame + size - kHeaderTrailerBytes;
  std::memcpy(magic, kHeaderMagic, sizeof(kHeaderMagic));
  StoreLittleEndian(Checksum64(frame, size - sizeof(uint64_t)), frame + size - sizeof(uint64_t));
}

bool VerifiesAsHeader(const uint8_t* data, size_t size) {
  flatbuffers::Verifier::Options vo;
  vo.max_depth = kVerifierMaxDepth;
  vo.max_tables = kVerifierMaxTables;
  flatbuffers::Verifier verifier(data, size, vo);
  return verifier.VerifyBuffer<Header>(nullptr);
}

// The refusal of a header frame that fails its checksum (step 3). Damage, unless the frame
// lacks the magic: then it is read whole, as a peer of an older version (no trailer) sends it,
// for its protocol_version alone, so that such a peer is told BadProtocolVersion rather than a
// puzzling BadChecksum; bytes that are no Header at all are Malformed. One flipped bit cannot
// make a version-3 frame pass for another version: it hits the magic (the rest, intact, reads
// as version 3) or leaves it whole.
absl::Status RefuseUnsealed(const zmq::message_t& frame) {
  const auto* bytes = static_cast<const uint8_t*>(frame.data());
  const bool magic = std::memcmp(bytes + frame.size() - kHeaderTrailerBytes, kHeaderMagic,
                                 sizeof(kHeaderMagic)) == 0;
  if (!magic) {
    const zmq::message_t copy = AlignedCopy(frame);  // rare: no receive path relies on it
    const auto* data = static_cast<const uint8_t*>(copy.data());
    if (!VerifiesAsHeader(data, copy.size()))
      return WireError(ErrorCode::Malformed, "header frame is no FlatBuffers Header");
    const uint16_t version = GetHeader(data)->protocol_version();
    if (version != kProtocolVersion)
      return WireError(ErrorCode::BadProtocolVersion,
                       absl::StrCat("protocol version ", version, ", expected ", kProtocolVersion,
                                    " (whose headers end in a checksum trailer)"));
  }
  return WireError(ErrorCode::BadChecksum,
                   "header fails its checksum: damaged on the way, none of its fields used");
}

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
    case ErrorCode::NoCredit:
      sc = absl::StatusCode::kResourceExhausted;
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
  std::vector<uint64_t> lengths, sums;
  lengths.reserve(payloads.size());
  sums.reserve(payloads.size());
  for (const auto& p : payloads) {
    lengths.push_back(p.size());
    sums.push_back(FrameChecksum(p));
  }
  return BuildHeader(h, lengths, sums);
}

zmq::message_t BuildHeader(const HeaderFields& h, std::span<const uint64_t> lengths,
                           std::span<const uint64_t> checksums) {
  flatbuffers::FlatBufferBuilder fbb(256 + h.message.size() + 16 * lengths.size() +
                                     16 * h.versions.size() + 24 * h.held_trains.size());
  auto lv = fbb.CreateVector(lengths.data(), lengths.size());
  auto cv = fbb.CreateVector(checksums.data(), checksums.size());
  auto mv = h.message.empty() ? 0 : fbb.CreateString(h.message);
  auto vv = h.versions.empty() ? 0 : fbb.CreateVectorOfStructs(h.versions);
  auto hv = h.held_trains.empty() ? 0 : fbb.CreateVectorOfStructs(h.held_trains);
  auto fv = h.figures ? BuildLearnerFigures(fbb, *h.figures) : 0;
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
  b.add_topk(h.topk);
  b.add_answers_on_control(h.answers_on_control);
  b.add_held_us(h.held_us);
  b.add_connection(h.connection);
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
  b.add_channel(h.channel);
  b.add_credit_bytes(h.credit_bytes);
  b.add_num_chunks(h.num_chunks);
  b.add_chunk_index(h.chunk_index);
  b.add_refused_type(h.refused_type);
  b.add_values_checksum(h.values_checksum);
  b.add_train_checksum(h.train_checksum);
  b.add_keyframe_version(h.keyframe_version);
  b.add_chain_updates(h.chain_updates);
  if (!h.held_trains.empty()) b.add_held_trains(hv);
  if (h.figures) b.add_figures(fv);
  fbb.Finish(b.Finish());
  return SealHeader(fbb.GetBufferPointer(), fbb.GetSize());
}

uint64_t FrameChecksum(const zmq::message_t& frame) {
  return Checksum64(frame.data(), frame.size());
}

zmq::message_t SealHeader(const void* flatbuffer, size_t size) {
  zmq::message_t frame(size + kHeaderTrailerBytes);
  std::memcpy(frame.data(), flatbuffer, size);
  WriteTrailer(frame.data<uint8_t>(), frame.size());
  return frame;
}

void ResealHeaderFrame(zmq::message_t& frame) {
  if (frame.size() >= kHeaderTrailerBytes) WriteTrailer(frame.data<uint8_t>(), frame.size());
}

bool HeaderChecksumMatches(const void* data, size_t size) {
  if (size < kHeaderTrailerBytes) return false;
  const auto* bytes = static_cast<const uint8_t*>(data);
  const size_t summed = size - sizeof(uint64_t);
  return std::memcmp(bytes + size - kHeaderTrailerBytes, kHeaderMagic, sizeof(kHeaderMagic)) == 0 &&
         Checksum64(bytes, summed) == LoadLittleEndian(bytes + summed);
}

uint64_t Message::payload_bytes() const {
  uint64_t n = 0;
  for (size_t i = 1; i < frames_.size(); ++i) n += frames_[i].size();
  return n;
}

absl::StatusOr<const Header*> VerifyHeaderFrame(zmq::message_t& frame, const Limits& limits) {
  if (frame.size() > limits.max_header_bytes)
    return WireError(ErrorCode::Malformed,
                     absl::StrCat("header of ", frame.size(), " bytes exceeds the cap of ",
                                  limits.max_header_bytes));
  if (frame.size() < 8 + kHeaderTrailerBytes)  // a root offset, the smallest vtable, a trailer
    return WireError(ErrorCode::Malformed, "header too short");
  // Before any field is read: a damaged header must not name a message it is not.
  if (!HeaderChecksumMatches(frame.data(), frame.size())) return RefuseUnsealed(frame);
  if (!Aligned(frame)) {
    frame = AlignedCopy(frame);
    if (!Aligned(frame)) return WireError(ErrorCode::Internal, "cannot align the header frame");
  }
  // The verifier checks alignment relative to the buffer start only; the copy above makes it
  // absolute. It sees the FlatBuffers bytes alone: no offset may point into the trailer.
  if (!VerifiesAsHeader(static_cast<const uint8_t*>(frame.data()),
                        frame.size() - kHeaderTrailerBytes))
    return WireError(ErrorCode::Malformed, "header fails the FlatBuffers verifier");
  const Header* h = GetHeader(frame.data());
  // The 2.0.8 verifier checks a vector's length prefix for 4-byte alignment only; vectors of
  // 8-byte elements are read in place, so they must start 8-aligned (found by the fuzzer).
  if (!ElementsAligned(h->frame_lengths()) || !ElementsAligned(h->frame_checksums()) ||
      !ElementsAligned(h->versions()) || !ElementsAligned(h->held_trains()))
    return WireError(ErrorCode::Malformed, "misaligned vector in the header");
  if (h->protocol_version() != kProtocolVersion)
    return WireError(
        ErrorCode::BadProtocolVersion,
        absl::StrCat("protocol version ", h->protocol_version(), ", expected ", kProtocolVersion));
  if (h->type() == MsgType::Invalid || h->type() > MsgType::MAX)
    return WireError(ErrorCode::UnknownType,
                     absl::StrCat("message type ", static_cast<int>(h->type())));
  if (h->ack() > AckStatus::MAX)
    return WireError(ErrorCode::Malformed, absl::StrCat("ack status ", static_cast<int>(h->ack())));
  if (h->error_code() > ErrorCode::MAX)
    return WireError(ErrorCode::Malformed,
                     absl::StrCat("error code ", static_cast<int>(h->error_code())));
  if (h->channel() > Channel::MAX)
    return WireError(ErrorCode::Malformed,
                     absl::StrCat("channel ", static_cast<int>(h->channel())));
  if (h->num_chunks() > limits.max_payload_frames ||
      h->chunk_index() >= std::max<uint32_t>(h->num_chunks(), 1))
    return WireError(ErrorCode::Malformed,
                     absl::StrCat("chunk ", h->chunk_index(), " of ", h->num_chunks()));
  return h;
}

absl::StatusOr<Message> ParseMessage(std::vector<zmq::message_t> frames, const Limits& limits,
                                     MessageIds* ids) {
  if (frames.empty()) return WireError(ErrorCode::Malformed, "no frames");
  if (frames.size() - 1 > limits.max_payload_frames)
    return WireError(ErrorCode::Malformed, absl::StrCat(frames.size() - 1, " payload frames"));
  auto verified = VerifyHeaderFrame(frames[0], limits);
  if (!verified.ok()) return verified.status();
  const Header* h = *verified;
  if (ids) *ids = MessageIds::Of(*h);
  const size_t np = frames.size() - 1;
  if (h->num_chunks() > 1 && np != 1)
    return WireError(ErrorCode::Malformed,
                     absl::StrCat("a train chunk carries one payload frame, not ", np));
  const auto* lens = h->frame_lengths();
  const auto* sums = h->frame_checksums();
  const size_t nl = lens ? lens->size() : 0, ns = sums ? sums->size() : 0;
  if (nl != np || ns != np)
    return WireError(ErrorCode::BadLength, absl::StrCat("header declares ", nl, " lengths and ", ns,
                                                        " checksums for ", np, " frames"));
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
    if (FrameChecksum(f) != sums->Get(i))
      return WireError(ErrorCode::BadChecksum, absl::StrCat("frame ", i, " checksum mismatch"));
  }
  // Payload spans are aligned too, so decoders may read floats in place. Only frames small
  // enough to share libzmq's receive buffer can be misaligned: the copies are small.
  for (size_t i = 1; i < frames.size(); ++i)
    if (!Aligned(frames[i])) frames[i] = AlignedCopy(frames[i]);
  Message m;
  m.frames_ = std::move(frames);
  m.header_ = h;  // points into frames_[0], whose storage the move keeps in place
  return m;
}

const char* MsgTypeName(MsgType t) { return EnumNameMsgType(t); }

}  // namespace diloco::wire
