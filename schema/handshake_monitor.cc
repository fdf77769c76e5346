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
  const int watched = ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | (disconnects ? ZMQ_EVENT_DISCONNECTED : 0);
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
    if (id == ZMQ_EVENT_HANDSHAKE_FAILED_AUTH)
      refusal_ = absl::StrCat("the server refused the CURVE handshake (ZAP status ", value, ") at ",
                              endpoint.to_string());
    if (id == ZMQ_EVENT_DISCONNECTED) disconnected_ = true;
  }
}

}  // namespace diloco::wire
