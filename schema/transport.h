// Socket-level helpers shared by server and worker: sending a header plus payload frames as one
// multipart message, receiving one with a deadline, and zero-copy payload frames that keep a
// shared buffer alive until ZeroMQ has sent them.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "kernels/codec_kind.h"
#include "schema/curve.h"
#include "schema/payload_layout.h"
#include "schema/train.h"
#include "schema/wire.h"

namespace diloco::wire {

using Bytes = std::vector<uint8_t>;

// A frame over [offset, offset+len) of a shared buffer, sent without copying; the buffer lives
// until ZeroMQ releases the frame.
zmq::message_t SharedFrame(std::shared_ptr<const Bytes> buffer, size_t offset, size_t len);
// A frame over [data, data+len) of a buffer the caller keeps alive and unchanged until sent.
zmq::message_t BorrowedFrame(const void* data, size_t len);

// Sends [routing_id,] header, payload as one message, or, with several payload frames, as a
// train of one message per frame (schema/train.h; receivers join it with a TrainAssembler);
// with h.chunk_index > 0, only the train's chunks from that one on (a resumed push: the shard
// holds the others). Payload frames are moved in and sent zero-copy. With `dontwait`, a full queue
// gives Unavailable instead of blocking. ROUTER_MANDATORY makes an unknown routing id an
// Unavailable too.
absl::Status Send(zmq::socket_t& socket, const HeaderFields& h,
                  std::vector<zmq::message_t> payloads, const std::string* routing_id = nullptr,
                  bool dontwait = true);
// The same with the payload frames' checksums already known (FrameChecksum of each), so bytes
// sent more than once (a snapshot to every contributor, a resent push) are hashed once.
absl::Status SendWithChecksums(zmq::socket_t& socket, const HeaderFields& h,
                               std::vector<zmq::message_t> payloads,
                               std::span<const uint64_t> checksums,
                               const std::string* routing_id = nullptr, bool dontwait = true);

// Receives one whole multipart message if one is ready (non-blocking). Returns nullopt when
// none is waiting.
std::optional<std::vector<zmq::message_t>> TryRecvMultipart(zmq::socket_t& socket);

// TryRecvMultipart + ParseMessage + `trains`.Add for a socket with one peer (a DEALER): the
// next whole message if one is complete (reading as many chunks of a train as are waiting);
// nullopt when nothing, or only part of a train, is waiting; the refusal of a message or
// chunk that does not validate.
absl::StatusOr<std::optional<Message>> TryRecvMessage(zmq::socket_t& socket,
                                                      TrainAssembler& trains);

// Common socket settings: linger bounded, message HWM as a backstop only, and no received frame
// larger than Limits::max_frame_bytes (libzmq drops such a peer before allocating the frame).
void ConfigureSocket(zmq::socket_t& socket);

// Process-wide malloc settings for receiving large frames; call once at startup. libzmq
// mallocs every received frame of a few MiB, and glibc's adaptive thresholds hand such buffers
// back to the kernel as soon as two or three are free together (a receiver a message or two
// behind), so the next frames page-fault and have their pages zeroed again (bench_transport,
// 4 MiB frames: ~150 faults a frame, the push path at ~75% of raw instead of ~90%). Fixed
// thresholds and a top pad of one arena heap keep freed frames mapped for reuse: the process
// keeps the peak of its frame heap resident (plus up to 256 MiB in the main arena) instead of
// faulting it in again. No-op outside glibc.
void TuneAllocatorForFrames();

// Puts every thread's allocations in glibc's main arena, the only one whose free top
// TrimFrameHeap can hand back: malloc_trim releases the free chunks of other arenas but not
// their top, which the top pad of TuneAllocatorForFrames keeps whole, so each thread that ever
// received or freed frames (ZeroMQ's I/O thread, apply lanes, the checkpoint writer, RocksDB's
// threads) kept up to 64 MiB resident for good: a 124M shard measured 11.6-12.1 bytes per
// parameter at steady state with one arena per thread and 11.2 in every run with one arena. For
// a process whose allocations are few and large (a shard); not for a trainer's threads, which
// allocate in their loops. Call before any thread starts. No-op outside glibc.
void UseOneMallocArena();

// Hands the free pages of every malloc arena back to the kernel (glibc's malloc_trim): what
// TuneAllocatorForFrames keeps mapped for the next burst of frames. For a process gone quiet
// after one (a shard after its workers' fp32 joins: up to ~2 bytes per parameter at 124M), so
// that its resident memory is what it holds, not what it once received. Costs the next burst
// its page faults again. No-op outside glibc.
void TrimFrameHeap();

// Fragment values (theta(0) uploads, FragmentUpdates) always travel as fp32, cut in chunks of
// this layout: workers adopt exactly the shard's values.
inline constexpr kernels::Codec kFragmentCodec{kernels::CodecKind::kFp32, 256};

// The layout fields of a payload of `numel` values encoded with `codec`: codec, block, topk,
// num_elements, and chunk_elements (ChunkElements of the block).
void SetPayloadLayout(HeaderFields& h, kernels::Codec codec, uint64_t numel);
// That payload's chunk frames, zero-copy over `buffer`, which holds the chunks back to back.
std::vector<zmq::message_t> PayloadFrames(std::shared_ptr<const Bytes> buffer, kernels::Codec codec,
                                          uint64_t numel);

// Asks the shard at `endpoint` for its live statistics (a Stats message) over a fresh DEALER,
// over CURVE with `curve` (a key the shard lists, for any worker id), and returns the JSON it
// answers with. PermissionDenied, naming the cause, when the shard refuses the handshake (an
// unlisted key, CURVE against no keys or the reverse); DeadlineExceeded if no answer comes in
// `timeout`. Never blocks past `timeout`.
absl::StatusOr<std::string> RequestStats(const std::string& endpoint, absl::Duration timeout,
                                         const CurveClientKeys* curve = nullptr);

}  // namespace diloco::wire
