// The ZeroMQ side of one shard for the worker's I/O thread: a DEALER socket for data (pushes,
// pulls, uploads, fragments) and, with SyncOptions::control_channel, a second one for
// heartbeats, each its own TCP stream, so that a heartbeat never waits behind a fragment that
// takes longer than the liveness timeout to cross a slow link. With CURVE, each socket is
// watched for a refused handshake, the only trace of a key the shard does not list; the data
// socket is watched for a lost connection (libzmq's own reconnect is otherwise silent).
//
// It is the ShardSession's transport (worker/shard_session.h) and the I/O thread's receiver:
// Receive joins payload trains and says how many bytes crossed the data connection, which the
// session's link rate measurement takes.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "absl/status/statusor.h"
#include "schema/handshake_monitor.h"
#include "schema/train.h"
#include "schema/transport.h"
#include "worker/shard_session.h"
#include "worker/sync_options.h"

namespace diloco::worker {

class ZmqShardLink final : public SessionTransport {
 public:
  // Connects nothing until the session's first Reconnect.
  ZmqShardLink(zmq::context_t& ctx, std::string endpoint, const SyncOptions& opt);

  void Reconnect(bool control) override;
  bool Send(bool control, const wire::HeaderFields& h, std::shared_ptr<const wire::Bytes> payload,
            kernels::Codec codec, uint64_t numel, std::span<const uint64_t> checksums) override;
  std::vector<std::string> TakeRefusals() override;
  bool TakeDisconnected() override;

  // What one read of a connection brought.
  struct Received {
    // The next whole message, if one is complete (nullopt: nothing, or only part of a train, is
    // waiting), or the refusal of one that does not validate.
    absl::StatusOr<std::optional<wire::Message>> message;
    bool arrived = false;  // anything came in: a message, a train's chunk, or a refused one
    // The bytes that crossed with it: a message's payload less its chunks that came before, or
    // the chunks kept for a train still arriving.
    uint64_t bytes = 0;
  };
  Received Receive(bool control);

  // Poll entries for the open sockets, data first.
  void AddPollItems(std::vector<zmq::pollitem_t>& items) const;
  bool has_control() const { return control_ != nullptr; }

 private:
  void Open(bool control);

  zmq::context_t& ctx_;
  const std::string endpoint_;
  const SyncOptions& opt_;
  std::unique_ptr<zmq::socket_t> data_, control_;  // control: null without a control channel
  // Declared after the sockets they watch, so destroyed first.
  std::unique_ptr<wire::HandshakeMonitor> data_monitor_, control_monitor_;
  wire::TrainAssembler data_trains_;     // FragmentUpdates of several chunks
  wire::TrainAssembler control_trains_;  // none expected; kept apart all the same
  FaultCount header_damages_;            // test only: TestFaults::corrupt_push_header_sends
};

}  // namespace diloco::worker
