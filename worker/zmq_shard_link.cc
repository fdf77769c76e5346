#include "worker/zmq_shard_link.h"

#include "schema/curve.h"

namespace diloco::worker {
namespace {

// Test only (TestFaults::corrupt_push_header_sends): `h` and `frames` sent whole, with
// one bit of the sealed header's seq field flipped, as a network might flip it.
bool SendWithDamagedHeader(zmq::socket_t& s, const wire::HeaderFields& h,
                           std::vector<zmq::message_t> frames,
                           std::span<const uint64_t> checksums) {
  std::vector<uint64_t> lengths, sums(checksums.begin(), checksums.end());
  for (const auto& f : frames) lengths.push_back(f.size());
  if (sums.empty())
    for (const auto& f : frames) sums.push_back(wire::FrameChecksum(f));
  zmq::message_t header = wire::BuildHeader(h, lengths, sums);
  // Header privately derives from flatbuffers::Table, the layout GetRoot itself casts to.
  const auto* table =
      reinterpret_cast<const flatbuffers::Table*>(wire::GetHeader(header.data<uint8_t>()));
  const auto at = table->GetOptionalFieldOffset(wire::Header::VT_SEQ);
  if (at == 0) return false;  // seq 0 is not stored: nothing to flip
  const_cast<uint8_t*>(reinterpret_cast<const uint8_t*>(table))[at] ^= 0x02;
  frames.insert(frames.begin(), std::move(header));
  for (size_t i = 0; i < frames.size(); ++i) {
    const auto more = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
    if (!s.send(frames[i], zmq::send_flags::dontwait | more)) return false;
  }
  return true;
}

}  // namespace

ZmqShardLink::ZmqShardLink(zmq::context_t& ctx, std::string endpoint, const SyncOptions& opt)
    : ctx_(ctx),
      endpoint_(std::move(endpoint)),
      opt_(opt),
      header_damages_(opt.faults ? opt.faults->corrupt_push_header_sends : FaultCount()) {}

// A fresh socket for one of the connections, monitored for a refused CURVE key before it
// connects, so the first handshake's verdict is seen too.
void ZmqShardLink::Open(bool control) {
  auto& socket = control ? control_ : data_;
  auto& monitor = control ? control_monitor_ : data_monitor_;
  monitor.reset();  // before the socket it watches
  socket = std::make_unique<zmq::socket_t>(ctx_, zmq::socket_type::dealer);
  wire::ConfigureSocket(*socket);
  const bool curve = !opt_.curve_server_key.empty();
  if (curve)  // keys checked by the caller; a bad one is refused there
    (void)wire::MakeCurveClient(*socket, opt_.curve_server_key, opt_.curve_public_key,
                                opt_.curve_secret_key);
  if (curve || !control)
    monitor = std::make_unique<wire::HandshakeMonitor>(ctx_, *socket, /*disconnects=*/!control);
  socket->set(zmq::sockopt::linger, 0);
  socket->set(zmq::sockopt::reconnect_ivl, 100);
  socket->set(zmq::sockopt::reconnect_ivl_max, 2000);
  socket->connect(endpoint_);
}

void ZmqShardLink::Reconnect(bool control) {
  Open(/*control=*/false);
  data_trains_.Drop("");  // a train half-received on the old socket never completes
  control_trains_.Drop("");
  if (control) Open(/*control=*/true);
}

bool ZmqShardLink::Send(bool control, const wire::HeaderFields& h,
                        std::shared_ptr<const wire::Bytes> payload, kernels::Codec codec,
                        uint64_t numel, std::span<const uint64_t> checksums) {
  zmq::socket_t& s = control && control_ ? *control_ : *data_;
  std::vector<zmq::message_t> frames;
  if (payload) frames = wire::PayloadFrames(std::move(payload), codec, numel);
  if (h.type == wire::MsgType::Push && h.fragment_id == 0 && h.seq == 1 && header_damages_.Take()) {
    return SendWithDamagedHeader(s, h, std::move(frames), checksums);
  }
  const absl::Status sent = checksums.empty()
                                ? wire::Send(s, h, std::move(frames))
                                : wire::SendWithChecksums(s, h, std::move(frames), checksums);
  return sent.ok();
}

std::vector<std::string> ZmqShardLink::TakeRefusals() {
  std::vector<std::string> out;
  for (auto* m : {data_monitor_.get(), control_monitor_.get()})
    if (m)
      if (auto refusal = m->TakeRefusal()) out.push_back(std::move(*refusal));
  return out;
}

bool ZmqShardLink::TakeDisconnected() { return data_monitor_ && data_monitor_->TakeDisconnected(); }

ZmqShardLink::Received ZmqShardLink::Receive(bool control) {
  zmq::socket_t* s = control ? control_.get() : data_.get();
  wire::TrainAssembler& trains = control ? control_trains_ : data_trains_;
  if (!s) return {std::nullopt};
  const uint64_t partial = trains.partial_bytes();
  Received r{wire::TryRecvMessage(*s, trains)};
  const uint64_t after = trains.partial_bytes();
  const bool whole = r.message.ok() && r.message->has_value();
  r.arrived = !r.message.ok() || whole || after != partial;
  if (whole) {
    const uint64_t absorbed = partial > after ? partial - after : 0;
    const uint64_t bytes = (*r.message)->payload_bytes();
    r.bytes = bytes > absorbed ? bytes - absorbed : 0;
  } else if (after > partial) {
    r.bytes = after - partial;
  }
  return r;
}

void ZmqShardLink::AddPollItems(std::vector<zmq::pollitem_t>& items) const {
  items.push_back({static_cast<void*>(*data_), 0, ZMQ_POLLIN, 0});
  if (control_) items.push_back({static_cast<void*>(*control_), 0, ZMQ_POLLIN, 0});
}

}  // namespace diloco::worker
