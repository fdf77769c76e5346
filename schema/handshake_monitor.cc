#include "schema/handshake_monitor.h"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace diloco::wire {
namespace {

std::string NextEndpoint() {
  static std::atomic<uint64_t> next{0};
  return absl::StrCat("inproc://diloco-handshake-monitor-", next.fetch_add(1));
}

}  // namespace

HandshakeMonitor::HandshakeMonitor(zmq::context_t& ctx, zmq::socket_t& socket, bool disconnects)
    : socket_(socket), events_(ctx, zmq::socket_type::pair) {
  const std::string endpoint = NextEndpoint();
  events_.set(zmq::sockopt::linger, 0);
  // Starting a monitor on a live socket cannot fail but for a closed context; the pair then
  // simply never reads an event, and the caller's liveness checks still apply.
  curve_ = socket_.get(zmq::sockopt::mechanism) == ZMQ_CURVE;
  const int watched = ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                      ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_SUCCEEDED |
                      (disconnects ? ZMQ_EVENT_DISCONNECTED : 0);
  if (zmq_socket_monitor(static_cast<void*>(socket_), endpoint.c_str(), watched) == 0)
    events_.connect(endpoint);
}

HandshakeMonitor::~HandshakeMonitor() {
  (void)zmq_socket_monitor(static_cast<void*>(socket_), nullptr, 0);
}

std::optional<std::string> HandshakeMonitor::TakeRefusal() {
  Drain();
  return std::exchange(refusal_, std::nullopt);
}

bool HandshakeMonitor::TakeDisconnected() {
  Drain();
  return std::exchange(disconnected_, false);
}

std::string HandshakeMonitor::WrongServerKey(const std::string& at) const {
  char key[41] = {};  // a 41-byte buffer asks for the key in Z85
  size_t size = sizeof(key);
  if (zmq_getsockopt(static_cast<void*>(socket_), ZMQ_CURVE_SERVERKEY, key, &size) != 0) key[0] = 0;
  return absl::StrCat("the CURVE handshake with ", at, " failed ", failed_in_a_row_,
                      " times in a row, the server closing each connection before it completed: "
                      "its public key is not the one this client was given (--curve_server_key ",
                      key, ")");
}

std::string HandshakeMonitor::KeysNeeded(const std::string& at) const {
  return absl::StrCat("the server at ", at,
                      " requires CURVE and this client has no keys (give --curve_server_key and "
                      "--curve_secret_key_file): it closed ",
                      failed_in_a_row_,
                      " handshakes in a row before they ended (or it is not a shard)");
}

void HandshakeMonitor::Drain() {
  for (;;) {
    // An event is two frames: 16-bit event id and 32-bit value, then the endpoint.
    zmq::message_t event, endpoint;
    if (!events_.recv(event, zmq::recv_flags::dontwait)) break;
    if (event.more()) (void)events_.recv(endpoint, zmq::recv_flags::dontwait);
    if (event.size() < 6) continue;
    uint16_t id = 0;
    uint32_t value = 0;
    std::memcpy(&id, event.data(), sizeof(id));
    std::memcpy(&value, static_cast<const char*>(event.data()) + sizeof(id), sizeof(value));
    const std::string at = endpoint.to_string();
    switch (id) {
      case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
        refusal_ =
            absl::StrCat("the server refused the CURVE handshake (ZAP status ", value, ") at ", at);
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
        if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH)
          refusal_ = curve_
                         ? absl::StrCat("the server at ", at,
                                        " does not speak CURVE (it has no "
                                        "--curve_secret_key_file) and this client has CURVE keys")
                         : absl::StrCat("the server at ", at,
                                        " requires CURVE and this client has no keys (give "
                                        "--curve_server_key and --curve_secret_key_file)");
        else if (++failed_in_a_row_ >= kFailedHandshakes)
          refusal_ = curve_ ? WrongServerKey(at) : KeysNeeded(at);
        break;
      case ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL:
        if (++failed_in_a_row_ >= kFailedHandshakes)
          refusal_ = curve_ ? WrongServerKey(at) : KeysNeeded(at);
        break;
      case ZMQ_EVENT_HANDSHAKE_SUCCEEDED:
        failed_in_a_row_ = 0;
        break;
      case ZMQ_EVENT_DISCONNECTED:
        disconnected_ = true;
        break;
      default:
        break;
    }
  }
}

}  // namespace diloco::wire
