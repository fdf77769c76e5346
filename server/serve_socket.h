// diloco-server's socket: CURVE (keys, the ZAP handler, the key a message's worker id must be
// bound to), the bound ROUTER socket, and sending the shard's replies. Apart from main and
// the serve loop (serve_loop.h) so that those read as the order of a pass, not socket detail.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "schema/curve.h"
#include "schema/transport.h"
#include "server/server_flags.h"
#include "server/shard.h"

namespace diloco::server {

// CURVE, when --curve_secret_key_file is given: the secret key, the authorized keys, and the
// ZAP handler, which must answer before the socket accepts its first connection.
struct Curve {
  std::string secret;
  std::optional<wire::AuthorizedKeys> auth;
  std::unique_ptr<wire::ZapHandler> zap;
};
// The keys of --curve_secret_key_file and --curve_authorized_keys and their ZAP handler,
// started; an empty Curve without them.
absl::StatusOr<Curve> StartCurve(zmq::context_t& ctx, const ServerOptions& so);

// The ROUTER socket, bound (with CURVE when `curve` has keys); its endpoint in `endpoint`.
absl::Status Bind(zmq::socket_t& sock, const ServerOptions& so, const Curve& curve,
                  std::string* endpoint);

// With CURVE, the worker id a message claims must be the one its authenticated key is listed
// for (Stats, read-only, may come from any listed key). Checked on the header alone, before the
// Shard sees the message; a message whose header does not verify goes on to the Shard, which
// refuses and counts it.
absl::Status CheckKeyBinding(const wire::AuthorizedKeys& keys, zmq::message_t& header_frame,
                             wire::MessageIds* claimed);

// Sends and clears `out`, counting the bytes sent and the replies to departed workers (they
// re-pull when they return).
void SendAll(zmq::socket_t& sock, Shard& shard, std::vector<Outgoing>& out);

}  // namespace diloco::server
