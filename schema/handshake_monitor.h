// Watches one client socket for a refused security handshake. No message ever reaches the
// application of a connection whose handshake fails, and libzmq retries in silence (or, for a
// mechanism mismatch, gives up in silence); the only traces are socket-monitor events, so a
// client that must tell its operator why a shard stays mute watches for them:
//  - a CURVE server whose ZAP handler denies the client's key answers with a ZMTP ERROR
//    (ZMQ_EVENT_HANDSHAKE_FAILED_AUTH, carrying the ZAP status code);
//  - a server of another mechanism (CURVE against a keyless client, or plaintext against a
//    CURVE client) fails the greeting (ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL, mechanism mismatch);
//  - a CURVE server given a HELLO sealed for another public key (the client holds the wrong
//    server key) cannot open it and closes the connection without a word: a CURVE client sees
//    only its handshake fail (ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL). One such failure may be a
//    shard dying mid-handshake; kFailedHandshakes in a row, none succeeding, is a refusal.
//  - a keyless client of a CURVE server does not always see the mismatch either: the server
//    closes the connection as soon as it has read the client's greeting, and when that close
//    comes before the client has read the server's greeting (a busy server), the client's
//    next write meets the reset and the server's greeting is discarded unread: the client sees
//    its handshake fail with EPIPE (NO_DETAIL), reconnects, and under load can do so for as
//    long as one cares to wait (CurveShardStandIn.AKeylessStatsRequestIsRefusedNamingTheKeys
//    timed out so beside busy loops, 2026-12-07). kFailedHandshakes in a row, none succeeding,
//    is a refusal for a keyless client too.
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
  // Handshakes failed in a row, with none succeeding, that make a refusal.
  static constexpr int kFailedHandshakes = 3;

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
  // Each reason names the endpoint. Other handshake failures (a lone dropped connection) are
  // left to the caller's liveness checks.
  std::optional<std::string> TakeRefusal();
  // Reads every waiting event; whether a connection was lost since the last call (`disconnects`
  // only).
  bool TakeDisconnected();

 private:
  void Drain();
  std::string WrongServerKey(const std::string& at) const;
  // A keyless client's refusal after kFailedHandshakes closed handshakes.
  std::string KeysNeeded(const std::string& at) const;

  zmq::socket_t& socket_;
  zmq::socket_t events_;
  bool curve_ = false;       // the socket is a CURVE client
  int failed_in_a_row_ = 0;  // handshakes failed since the last that succeeded
  std::optional<std::string> refusal_;
  bool disconnected_ = false;
};

}  // namespace diloco::wire
