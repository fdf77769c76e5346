// Optional CURVE security for the ROUTER/DEALER links (docs/security.md has the threat model).
//
// Keys are CurveZMQ key pairs in Z85 text (40 characters). The server holds a secret key and
// an authorized-keys file ("worker_id z85-public-key" per line); a ZAP handler on the server's
// context admits only listed keys (without a ZAP handler, CURVE would accept any client key)
// and names the key as the connection's ZAP User-Id. Every frame received on that connection
// carries the User-Id, so the server binds each message's claimed worker id to the key that
// actually sent it: a listed key claiming another worker's id is refused.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <zmq.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace diloco::wire {

inline constexpr size_t kZ85KeyChars = 40;
// The ZAP domain the server sets; the handler answers requests of any domain the same way.
inline constexpr char kZapDomain[] = "diloco";

struct CurveKeyPair {
  std::string public_key;  // Z85
  std::string secret_key;  // Z85
};

absl::StatusOr<CurveKeyPair> NewCurveKeyPair();
// The public key of a Z85 secret key.
absl::StatusOr<std::string> CurvePublicKey(absl::string_view secret_z85);
// True for 40 characters that decode as Z85 (a 32-byte key).
bool IsZ85Key(absl::string_view key);

// A file holding one Z85 key (surrounding whitespace ignored).
absl::StatusOr<std::string> ReadKeyFile(const std::string& path);
// Writes `prefix`.secret (mode 0600) and `prefix`.public, each one key and a newline.
absl::Status WriteKeyPair(const std::string& prefix, const CurveKeyPair& pair);

// A client's CURVE identity: the server's public key and this client's key pair (Z85).
struct CurveClientKeys {
  std::string server_public_key, public_key, secret_key;
};
// From the command line's two settings, both or neither: the server's key as Z85 text or a
// file holding it, and the client's secret key file (its public key is derived). nullopt when
// both are empty; InvalidArgument naming the flag for one without the other or a bad key.
absl::StatusOr<std::optional<CurveClientKeys>> CurveClientKeysFrom(
    const std::string& server_key_or_file, const std::string& secret_key_file);

// The workers allowed to connect, by public key. One key names one worker; a worker may have
// several keys (rotation).
class AuthorizedKeys {
 public:
  // Lines "worker_id z85-public-key"; blank lines and lines starting with '#' are skipped.
  static absl::StatusOr<AuthorizedKeys> Parse(absl::string_view text);
  static absl::StatusOr<AuthorizedKeys> Read(const std::string& path);

  std::optional<uint32_t> WorkerOf(absl::string_view public_z85) const;
  size_t size() const { return worker_of_key_.size(); }

 private:
  absl::flat_hash_map<std::string, uint32_t> worker_of_key_;
};

// Socket roles. Call before bind/connect. Errors (a libzmq without CURVE, a bad key) come back
// as a Status, never as an exception.
absl::Status MakeCurveServer(zmq::socket_t& socket, const std::string& secret_z85);
absl::Status MakeCurveClient(zmq::socket_t& socket, const std::string& server_public_z85,
                             const std::string& public_z85, const std::string& secret_z85);

// The ZAP User-Id of the connection a received frame came from; nullopt without one.
std::optional<std::string> UserIdOf(const zmq::message_t& frame);

// Answers ZAP requests (inproc://zeromq.zap.01 on `ctx`) on its own thread: CURVE clients
// whose key is listed are admitted with their Z85 key as User-Id; everything else gets 400.
// Start it before the server socket binds; destroy it before `ctx`.
class ZapHandler {
 public:
  static absl::StatusOr<std::unique_ptr<ZapHandler>> Start(zmq::context_t& ctx,
                                                           AuthorizedKeys keys);
  ~ZapHandler();

  uint64_t admitted() const { return admitted_; }
  uint64_t refused() const { return refused_; }
  // For the operator's log: the newest refusal since the last call (peer address, key, why)
  // and how many there were, e.g. "2 CURVE handshakes refused, the newest from 10.0.0.7: key
  // <z85> is not in the authorized keys"; nullopt if none.
  std::optional<std::string> TakeRefusalNote();

 private:
  ZapHandler(zmq::socket_t socket, AuthorizedKeys keys);
  void Loop();

  zmq::socket_t socket_;
  AuthorizedKeys keys_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> admitted_{0}, refused_{0};
  std::mutex mu_;
  std::string newest_refusal_;  // guarded by mu_
  uint64_t noted_ = 0;          // guarded by mu_: refusals already in a note
  std::thread thread_;
};

}  // namespace diloco::wire
