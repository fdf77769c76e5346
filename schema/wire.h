// The message layer of the wire protocol: building a multipart message from header fields and
// payload frames, and validating a received one. A refusal is an absl::Status carrying an
// ErrorCode (docs/protocol.md lists them and which are retryable).
//
// The header frame (protocol version 3) is the FlatBuffers Header followed by a 12-byte trailer:
// the 4 bytes kHeaderMagic, then the XXH3-64 (seed 0, little-endian) of every byte before it.
// Payload frames carry sums listed in the header; without a sum of its own, a bit flipped in a
// header field (seq, fragment, weight, base version) made another valid message, and TCP's
// checksum lets such flips through at WAN scale while CURVE is optional.
//
// Validation order, cheapest and least trusting first (docs/protocol.md, "Validation order"):
//   1. frame count (at least the header, at most Limits::max_payload_frames payloads)
//   2. header size cap, before the verifier: FlatBuffers 2.0.8 only asserts its own bound
//   3. header checksum (the trailer), before any field is read or the verifier runs. A frame
//      that fails it is refused BadChecksum, with two exceptions for a frame that does not end
//      in kHeaderMagic: one that parses whole as a Header of another protocol_version is an
//      older peer's (BadProtocolVersion), one that does not parse is no header (Malformed).
//      One flipped bit never makes a version-3 header pass for another version (a fatal
//      refusal): with its magic intact it is BadChecksum, and with the magic hit the rest is
//      intact and parses as version 3
//   4. alignment: a misaligned header frame (libzmq hands out small frames at any offset of its
//      receive buffer) is copied, since FlatBuffers reads scalars in place
//   5. FlatBuffers verifier, over the bytes before the trailer, with tight depth and table limits
//   6. protocol version (field 0 of the root table forever, so any version can be read), then
//      enum ranges (type, ack, error_code, channel): a peer of another version is told so, not
//      BadLength and a train chunk's place (chunk_index < num_chunks, one payload frame)
//   7. declared vs actual frame lengths, 8. XXH3-64 checksums (the only O(bytes) step)
// Plan, model and identity checks belong to the receiver, which knows what to expect.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "schema/learner_figures.h"
#include "schema/protocol_generated.h"

namespace diloco::wire {

// 2: quantized downloads; 3: the header checksum trailer. A new message type needs no new
// version: a receiver that does not know it refuses it UnknownType, which its sender can take
// as "not supported here" (Leave, 2026-12-06: docs/protocol.md, "Leaving").
inline constexpr uint16_t kProtocolVersion = 3;

// The staleness of a push based on version `base` and merged in the round that makes version
// `round`: the rounds other pushes closed in between (0 for a push merged in the round right after
// its base). The shard weighs and refuses pushes by it on arrival (round = its version + 1: the
// open round); the worker reports it from the Applied answer (round = the answer's version).
constexpr uint64_t Staleness(uint64_t base, uint64_t round) {
  return round > base + 1 ? round - base - 1 : 0;
}

struct Limits {
  size_t max_header_bytes = 64 * 1024;
  size_t max_payload_frames = 4096;
  uint64_t max_frame_bytes = uint64_t{1} << 30;
};

// Header frames are verified with these FlatBuffers limits: the Header is one table holding
// vectors of scalars and structs, so depth 2 and one table suffice; a little slack is kept.
inline constexpr uint32_t kVerifierMaxDepth = 4;
inline constexpr uint32_t kVerifierMaxTables = 4;
// FlatBuffers reads scalars in place: a header frame must start at this alignment.
inline constexpr size_t kHeaderAlignment = 8;
// The header trailer: kHeaderMagic, then the XXH3-64 of the frame's bytes before the sum.
inline constexpr char kHeaderMagic[4] = {'D', 'L', 'H', 'C'};
inline constexpr size_t kHeaderTrailerBytes = sizeof(kHeaderMagic) + sizeof(uint64_t);

// Everything a header can say; fields a message type does not use stay default.
struct HeaderFields {
  MsgType type = MsgType::Invalid;
  uint64_t plan_fingerprint = 0;
  uint64_t model_fingerprint = 0;
  uint32_t worker_id = 0;
  uint64_t generation = 0;
  uint64_t seq = 0;
  uint32_t shard = 0;
  uint64_t incarnation = 0;
  uint32_t fragment_id = 0;
  uint64_t base_version = 0;
  uint64_t version = 0;
  uint64_t round = 0;
  uint64_t tokens = 0;
  uint32_t steps = 0;
  uint8_t codec = 0;
  uint32_t block = 0;
  uint64_t num_elements = 0;
  uint64_t chunk_elements = 0;
  AckStatus ack = AckStatus::Queued;
  ErrorCode error_code = ErrorCode::None;
  std::string message;
  std::vector<FragmentVersion> versions;
  uint64_t step_time_us = 0;
  uint64_t fleet_step_time_us = 0;
  Channel channel = Channel::Data;
  uint64_t credit_bytes = 0;
  uint32_t num_chunks = 0;  // set by Send for a payload train (schema/train.h)
  // Set by Send for each chunk of a train; given to Send > 0, the train is sent from this chunk
  // on (a resumed push: the shard holds the chunks before it; docs/protocol.md, "Trains").
  uint32_t chunk_index = 0;
  MsgType refused_type = MsgType::Invalid;  // Error: the refused message's type
  uint64_t values_checksum = 0;     // FragmentUpdate of quantized updates: the values they make
  uint32_t topk = 0;                // codec topk: entries kept per block (kernels::Codec::k)
  bool answers_on_control = false;  // control Hello: Queued answers go on that connection
  uint64_t held_us = 0;             // Applied FragmentUpdate: the push's time at the shard
  // A train's chunks: TrainChecksum of its chunks' checksums (set by Send; schema/train.h).
  uint64_t train_checksum = 0;
  std::vector<HeldTrain> held_trains;  // Welcome: pushes whose leading chunks the shard holds
  uint32_t connection = 0;  // data Hello: which of the worker's data connections (0: unsaid)
  std::optional<LearnerFiguresFields> figures;  // worker Heartbeat: the learner's figures
  // Push: the keyframe the worker holds; FragmentUpdate chain: the keyframe after it (0: every
  // version is one). docs/protocol.md, "Keyframes".
  uint64_t keyframe_version = 0;
  uint32_t chain_updates = 0;  // FragmentUpdate chain: its updates (0: version - base_version)
};

// What names a message in a refusal of it (an Error's worker_id, fragment_id, seq and
// refused_type).
struct MessageIds {
  uint32_t worker = 0, fragment = 0;
  uint64_t seq = 0;
  MsgType type = MsgType::Invalid;
  uint32_t chunk_index = 0, num_chunks = 0;  // its place in a train (num_chunks 0: none)
  static MessageIds Of(const Header& h) {
    return {h.worker_id(), h.fragment_id(), h.seq(), h.type(), h.chunk_index(), h.num_chunks()};
  }
};

// A refusal: an absl::Status whose payload carries the wire ErrorCode.
absl::Status WireError(ErrorCode code, absl::string_view what);
ErrorCode ErrorCodeOf(const absl::Status& s);

// Serialises the header, declaring each payload frame's length and XXH3-64 checksum.
zmq::message_t BuildHeader(const HeaderFields& h, std::span<const zmq::message_t> payloads);
// The same with lengths and checksums the caller already has (a resent push, a shared snapshot).
zmq::message_t BuildHeader(const HeaderFields& h, std::span<const uint64_t> lengths,
                           std::span<const uint64_t> checksums);
// The checksum BuildHeader declares for a payload frame.
uint64_t FrameChecksum(const zmq::message_t& frame);
// A header frame of these FlatBuffers bytes: a copy with the trailer appended (BuildHeader's
// last step; for tests that build a Header of their own).
zmq::message_t SealHeader(const void* flatbuffer, size_t size);
// Rewrites the trailer of a header frame of at least kHeaderTrailerBytes to match the bytes
// before it: for tests and the fuzzer that alter a header on purpose and want the checks behind
// the checksum to see it.
void ResealHeaderFrame(zmq::message_t& frame);
// Step 3 alone: the frame ends in kHeaderMagic and the XXH3-64 of the bytes before its sum.
bool HeaderChecksumMatches(const void* data, size_t size);

// A validated message. Owns its frames; header() points into the first one.
class Message {
 public:
  const Header& header() const { return *header_; }
  MsgType type() const { return header_->type(); }
  size_t num_payloads() const { return frames_.size() - 1; }
  std::span<const uint8_t> payload(size_t i) const {
    const auto& f = frames_[i + 1];
    return {static_cast<const uint8_t*>(f.data()), f.size()};
  }
  uint64_t payload_bytes() const;
  // One message of a payload train, still to be joined (TrainAssembler); a joined train or a
  // message sent whole is not.
  bool is_chunk() const { return header_->num_chunks() > 1 && !joined_; }

 private:
  friend absl::StatusOr<Message> ParseMessage(std::vector<zmq::message_t> frames,
                                              const Limits& limits, MessageIds* ids);
  friend class TrainAssembler;
  std::vector<zmq::message_t> frames_;
  const Header* header_ = nullptr;
  bool joined_ = false;
};

// Validates `frames` (header first, payloads after; no routing frames), steps 1 to 8 above.
// `ids`, when given, is set as soon as the header verifies, so that a refusal of the payload
// (BadChecksum, BadLength) can name the message; it stays default when the header fails (a
// header that fails its checksum names nothing: none of its fields can be trusted).
absl::StatusOr<Message> ParseMessage(std::vector<zmq::message_t> frames, const Limits& limits = {},
                                     MessageIds* ids = nullptr);

// Steps 2 to 6 on a header frame alone: what a receiver may read before paying for payload
// checksums (the server's CURVE identity check). May replace `frame` by an aligned copy; the Header
// points into `frame` and lives as long as it does.
absl::StatusOr<const Header*> VerifyHeaderFrame(zmq::message_t& frame, const Limits& limits = {});

const char* MsgTypeName(MsgType t);

}  // namespace diloco::wire
