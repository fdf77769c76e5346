#include "schema/transport.h"

#include <algorithm>
#include <optional>

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "schema/handshake_monitor.h"

namespace diloco::wire {
namespace {

void ReleaseShared(void* /*data*/, void* hint) {
  delete static_cast<std::shared_ptr<const Bytes>*>(hint);
}

}  // namespace

zmq::message_t SharedFrame(std::shared_ptr<const Bytes> buffer, size_t offset, size_t len) {
  auto* keep = new std::shared_ptr<const Bytes>(std::move(buffer));
  void* data = const_cast<uint8_t*>((*keep)->data() + offset);
  return zmq::message_t(data, len, &ReleaseShared, keep);
}

zmq::message_t BorrowedFrame(const void* data, size_t len) {
  return zmq::message_t(const_cast<void*>(data), len, nullptr, nullptr);
}

namespace {

absl::Status SendFrames(zmq::socket_t& socket, zmq::message_t header,
                        std::vector<zmq::message_t> payloads, const std::string* routing_id,
                        bool dontwait) {
  const auto base = dontwait ? zmq::send_flags::dontwait : zmq::send_flags::none;
  try {
    if (routing_id) {
      if (!socket.send(zmq::buffer(*routing_id), base | zmq::send_flags::sndmore))
        return absl::UnavailableError("send queue full");
    }
    auto flags = payloads.empty() ? base : base | zmq::send_flags::sndmore;
    if (!socket.send(header, flags)) return absl::UnavailableError("send queue full");
    for (size_t i = 0; i < payloads.size(); ++i) {
      // Once the first frame is queued, the rest of a multipart message cannot block.
      auto f = i + 1 == payloads.size() ? zmq::send_flags::none : zmq::send_flags::sndmore;
      socket.send(payloads[i], f);
    }
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("send: ", e.what()));
  }
  return absl::OkStatus();
}

// Several payload frames go as a train (schema/train.h): one message per frame, each with the
// header plus its chunk's place, length and checksum, and the train's checksum. Nothing else is
// sent on the socket in between, so the receiver sees the train's messages back to back. A
// resumed train (h.chunk_index > 0) sends its chunks from that one on.
absl::Status SendTrain(zmq::socket_t& socket, const HeaderFields& h,
                       std::vector<zmq::message_t> payloads, std::span<const uint64_t> checksums,
                       const std::string* routing_id, bool dontwait) {
  if (h.chunk_index >= payloads.size())
    return absl::InvalidArgumentError(
        absl::StrCat("a train of ", payloads.size(), " chunks resumed at chunk ", h.chunk_index));
  HeaderFields hk = h;
  hk.num_chunks = static_cast<uint32_t>(payloads.size());
  hk.train_checksum = TrainChecksum(checksums);
  for (size_t k = h.chunk_index; k < payloads.size(); ++k) {
    hk.chunk_index = static_cast<uint32_t>(k);
    const uint64_t len = payloads[k].size();
    std::vector<zmq::message_t> one;
    one.push_back(std::move(payloads[k]));
    // A chunk that does not fit the queue cuts the train; the receiver drops what came of it.
    if (auto s = SendFrames(socket, BuildHeader(hk, {&len, 1}, checksums.subspan(k, 1)),
                            std::move(one), routing_id, dontwait);
        !s.ok())
      return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Send(zmq::socket_t& socket, const HeaderFields& h,
                  std::vector<zmq::message_t> payloads, const std::string* routing_id,
                  bool dontwait) {
  std::vector<uint64_t> sums;
  sums.reserve(payloads.size());
  for (const auto& p : payloads) sums.push_back(FrameChecksum(p));
  return SendWithChecksums(socket, h, std::move(payloads), sums, routing_id, dontwait);
}

absl::Status SendWithChecksums(zmq::socket_t& socket, const HeaderFields& h,
                               std::vector<zmq::message_t> payloads,
                               std::span<const uint64_t> checksums, const std::string* routing_id,
                               bool dontwait) {
  if (checksums.size() != payloads.size())
    return absl::InvalidArgumentError("one checksum per payload frame");
  if (payloads.size() > 1)
    return SendTrain(socket, h, std::move(payloads), checksums, routing_id, dontwait);
  if (h.chunk_index != 0) return absl::InvalidArgumentError("a message sent whole has no chunks");
  const uint64_t len = payloads.empty() ? 0 : payloads[0].size();
  zmq::message_t header = BuildHeader(h, {&len, payloads.size()}, checksums);
  return SendFrames(socket, std::move(header), std::move(payloads), routing_id, dontwait);
}

std::optional<std::vector<zmq::message_t>> TryRecvMultipart(zmq::socket_t& socket) {
  std::vector<zmq::message_t> parts;
  zmq::message_t m;
  if (!socket.recv(m, zmq::recv_flags::dontwait)) return std::nullopt;
  parts.push_back(std::move(m));
  while (parts.back().more()) {
    zmq::message_t next;
    (void)socket.recv(next, zmq::recv_flags::none);  // the rest of a multipart is already here
    parts.push_back(std::move(next));
  }
  return parts;
}

absl::StatusOr<std::optional<Message>> TryRecvMessage(zmq::socket_t& socket,
                                                      TrainAssembler& trains) {
  for (;;) {  // the chunks of a train that are already here, in one call
    auto frames = TryRecvMultipart(socket);
    if (!frames) return std::optional<Message>();
    auto m = ParseMessage(std::move(*frames));
    if (!m.ok()) {
      trains.Drop("");
      return m.status();
    }
    auto whole = trains.Add("", *std::move(m), absl::Now());
    if (!whole.ok() || whole->has_value()) return whole;
  }
}

void ConfigureSocket(zmq::socket_t& socket) {
  socket.set(zmq::sockopt::linger, 200);
  socket.set(zmq::sockopt::sndhwm, 10000);
  socket.set(zmq::sockopt::rcvhwm, 10000);
  // libzmq drops a connection that sends a bigger frame before allocating for it.
  socket.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(Limits{}.max_frame_bytes));
}

void TuneAllocatorForFrames() {
#if defined(__GLIBC__)
  // Frames up to 32 MiB (glibc's own adaptive ceiling) come from the heap, and up to 256 MiB
  // of freed frames stay mapped for reuse rather than being trimmed after every message.
  mallopt(M_MMAP_THRESHOLD, 32 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
  // A thread's arena grows in heaps of at most 64 MiB, and glibc unmaps a heap as soon as it
  // empties, whatever the trim threshold, unless the top pad is a whole heap: a payload held
  // whole until verified (64 MiB and more) would otherwise fault its frames in again each time.
  mallopt(M_TOP_PAD, 64 << 20);
#endif
}

void UseOneMallocArena() {
#if defined(__GLIBC__)
  mallopt(M_ARENA_MAX, 1);
#endif
}

void TrimFrameHeap() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

void SetPayloadLayout(HeaderFields& h, kernels::Codec codec, uint64_t numel) {
  h.codec = static_cast<uint8_t>(codec.kind);
  h.block = codec.block;
  h.topk = codec.k;
  h.num_elements = numel;
  h.chunk_elements = ChunkElements(codec.block);
}

std::vector<zmq::message_t> PayloadFrames(std::shared_ptr<const Bytes> buffer, kernels::Codec codec,
                                          uint64_t numel) {
  const PayloadLayout layout(codec, numel);
  std::vector<zmq::message_t> frames;
  frames.reserve(layout.chunks());
  for (const PayloadChunk& c : layout)
    frames.push_back(SharedFrame(buffer, c.byte_offset, c.bytes));
  return frames;
}

absl::StatusOr<std::string> RequestStats(const std::string& endpoint, absl::Duration timeout,
                                         const CurveClientKeys* curve) {
  try {
    zmq::context_t ctx(1);
    zmq::socket_t s(ctx, zmq::socket_type::dealer);
    s.set(zmq::sockopt::linger, 0);
    if (curve)
      if (auto st =
              MakeCurveClient(s, curve->server_public_key, curve->public_key, curve->secret_key);
          !st.ok())
        return st;
    // Watched whatever the mechanism: a refused handshake (another mechanism, an unlisted key)
    // is named, not left to the deadline.
    HandshakeMonitor monitor(ctx, s);
    s.connect(endpoint);
    HeaderFields h;
    h.type = MsgType::Stats;
    // Sent without blocking and retried: after a refused handshake libzmq ends the connection's
    // pipe and does not reconnect, and a blocking send on a DEALER with no pipe waits forever,
    // past any deadline (seen as a diloco-ctl that never exited when the refusal came before
    // the send).
    bool sent = false;
    const absl::Time end = absl::Now() + timeout;
    while (absl::Now() < end) {
      if (!sent) {
        const absl::Status st = Send(s, h, {}, nullptr, /*dontwait=*/true);
        if (!st.ok() && !absl::IsUnavailable(st)) return st;
        sent = st.ok();
      }
      zmq::pollitem_t item{static_cast<void*>(s), 0, ZMQ_POLLIN, 0};
      zmq::poll(&item, 1, std::chrono::milliseconds(20));
      if (auto refusal = monitor.TakeRefusal())
        return absl::PermissionDeniedError(
            curve ? absl::StrCat("stats: ", *refusal, "; the key of --curve_secret_key_file (",
                                 curve->public_key,
                                 ") must be in the shard's --curve_authorized_keys")
                  : absl::StrCat("stats: ", *refusal));
      auto frames = TryRecvMultipart(s);
      if (!frames) continue;
      auto m = ParseMessage(std::move(*frames));
      if (!m.ok()) return m.status();
      if (m->type() == MsgType::Stats && m->header().message()) return m->header().message()->str();
    }
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("stats from ", endpoint, ": ", e.what()));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("no answer from ", endpoint, " within ", absl::FormatDuration(timeout),
                   curve ? ""
                         : " (a shard started with CURVE answers only --curve_server_key and "
                           "--curve_secret_key_file with a listed key)"));
}

}  // namespace diloco::wire
