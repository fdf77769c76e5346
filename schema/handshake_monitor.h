// Watches one client socket for a refused security handshake. A CURVE server whose ZAP handler
// denies the client's key answers with a ZMTP ERROR command and closes the connection; libzmq
// then reconnects and retries forever, and no message ever reaches the application. The only
// trace is a socket-monitor event (ZMQ_EVENT_HANDSHAKE_FAILED_AUTH, carrying the ZAP status
// code), so a worker that must tell its operator "this shard refuses your key" watches for it.
#pragma once

#include <optional>
#include <string>
#include <zmq.hpp>

namespace diloco::wire {

class HandshakeMonitor {
 public:
  // Starts monitoring `socket` (which must outlive this object) before it connects.
  HandshakeMonitor(zmq::context_t& ctx, zmq::socket_t& socket);
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

 private:
  zmq::socket_t& socket_;
  zmq::socket_t events_;
};

}  // namespace diloco::wire
