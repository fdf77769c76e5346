// Watches one client socket for a refused security handshake. A CURVE server whose ZAP handler
// denies the client's key answers with a ZMTP ERROR command and closes the connection; libzmq
// then reconnects and retries forever, and no message ever reaches the application. The only
// trace is a socket-monitor event (ZMQ_EVENT_HANDSHAKE_FAILED_AUTH, carrying the ZAP status
// code), so a worker that must tell its operator "this shard refuses your key" watches for it.
//
// Asked to, it also watches for a lost connection (ZMQ_EVENT_DISCONNECTED): libzmq reconnects a
// client socket on its own, so the application otherwise never learns that what it sent since
// the loss went nowhere, and that the peer sees a new connection. A worker reconnects at once on
// it, so that its Hello (and the shard's Welcome, which lists the push chunks the shard kept from
// the lost connection) come before anything it sends again (docs/protocol.md, "Trains").
#pragma once

#include <optional>
#include <string>
#include <zmq.hpp>

namespace diloco::wire {

class HandshakeMonitor {
 public:
  // Starts monitoring `socket` (which must outlive this object) before it connects; for lost
  // connections too with `disconnects`.
  HandshakeMonitor(zmq::context_t& ctx, zmq::socket_t& socket, bool disconnects = false);
  ~HandshakeMonitor();
  HandshakeMonitor(const HandshakeMonitor&) = delete;
  HandshakeMonitor& operator=(const HandshakeMonitor&) = delete;

  // The monitor's socket, for a poll set (readable when events are waiting).
  zmq::socket_t& events() { return events_; }
  // Reads every waiting event; returns why the peer refused the handshake if one says so
  // (e.g. "the server refused the CURVE handshake (ZAP status 400) at tcp://..."), else nullopt.
  // Handshake failures the peer did not decide (a protocol error, a dropped connection) are
  // left to the caller's liveness checks.
  std::optional<std::string> TakeRefusal();
  // Reads every waiting event; whether a connection was lost since the last call (`disconnects`
  // only).
  bool TakeDisconnected();

 private:
  void Drain();

  zmq::socket_t& socket_;
  zmq::socket_t events_;
  std::optional<std::string> refusal_;
  bool disconnected_ = false;
};

}  // namespace diloco::wire
