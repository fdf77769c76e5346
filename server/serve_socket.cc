// diloco-server's socket (serve_socket.h).
#include "server/serve_socket.h"

#include "absl/strings/str_cat.h"

namespace diloco::server {

absl::StatusOr<Curve> StartCurve(zmq::context_t& ctx, const ServerOptions& so) {
  Curve c;
  if (so.curve_secret_key_file.empty()) return c;
  auto key = wire::ReadKeyFile(so.curve_secret_key_file);
  if (!key.ok()) return key.status();
  c.secret = *key;
  auto keys = wire::AuthorizedKeys::Read(so.curve_authorized_keys);
  if (!keys.ok()) return keys.status();
  c.auth = *keys;
  auto handler = wire::ZapHandler::Start(ctx, *std::move(keys));
  if (!handler.ok()) return handler.status();
  c.zap = std::move(*handler);
  return c;
}

absl::Status Bind(zmq::socket_t& sock, const ServerOptions& so, const Curve& curve,
                  std::string* endpoint) {
  wire::ConfigureSocket(sock);
  sock.set(zmq::sockopt::router_mandatory, 1);
  if (curve.auth) {
    if (auto s = wire::MakeCurveServer(sock, curve.secret); !s.ok()) return s;
  }
  try {
    sock.bind(so.bind);
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("cannot bind ", so.bind, ": ", e.what()));
  }
  *endpoint = sock.get(zmq::sockopt::last_endpoint);
  return absl::OkStatus();
}

absl::Status CheckKeyBinding(const wire::AuthorizedKeys& keys, zmq::message_t& header_frame,
                             wire::MessageIds* claimed) {
  using namespace wire;
  const auto user = UserIdOf(header_frame);  // before VerifyHeaderFrame may copy the frame
  auto h = VerifyHeaderFrame(header_frame);
  if (!h.ok() || (*h)->type() == MsgType::Stats) return absl::OkStatus();
  *claimed = MessageIds::Of(**h);
  const auto listed = user ? keys.WorkerOf(*user) : std::nullopt;
  if (!listed) return WireError(ErrorCode::BadIdentity, "connection has no authorized CURVE key");
  if (*listed != claimed->worker)
    return WireError(ErrorCode::BadIdentity,
                     absl::StrCat("this CURVE key belongs to worker ", *listed,
                                  ", message claims worker ", claimed->worker));
  return absl::OkStatus();
}

void SendAll(zmq::socket_t& sock, Shard& shard, std::vector<Outgoing>& out) {
  for (auto& o : out) {
    uint64_t bytes = 0;
    for (const auto& p : o.payloads) bytes += p.size();
    auto s = o.checksums ? wire::SendWithChecksums(sock, o.header, std::move(o.payloads),
                                                   *o.checksums, &o.routing_id)
                         : wire::Send(sock, o.header, std::move(o.payloads), &o.routing_id);
    if (!s.ok())
      shard.CountUnroutable();
    else
      shard.CountBytesOut(bytes);
  }
  out.clear();
}

}  // namespace diloco::server
