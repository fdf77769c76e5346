// The key-value store an island's ranks meet through: rank 0 serves it on MASTER_ADDR:PORT
// (a ZeroMQ ROUTER on its own thread), every rank (rank 0 too) is a client. Gloo's rendezvous
// (gloo::rendezvous::Context::connectFullMesh) exchanges the ranks' transport addresses
// through it, and the island puts each rank's description there first, to refuse ranks built
// from a different model or flags before any collective runs.
//
// Gloo ships file, hash and Redis stores but no TCP store (that lives in PyTorch's c10d), so
// this is one, as small as gloo's Store interface allows: set, get (waiting for the key) and
// wait with a deadline. Keys are never deleted; the store lives as long as rank 0's island.
//
// With the learner's CURVE key pair (the one it holds for the shards) the store speaks CURVE:
// rank 0 serves with that pair and admits only clients presenting its public key, which only
// the island's ranks can prove they hold. Without keys it speaks plaintext, which Island::Join
// allows on loopback only (or when asked by name: --island_insecure). Gloo's own pairs, like
// NCCL's and torchrun's store, carry the gradients unencrypted on the cluster's network.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>
#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "gloo/rendezvous/store.h"
#include "schema/curve.h"

namespace diloco::island {

// Rank 0's server. Binds host:port (host resolved to one IPv4 address) and answers until
// destroyed.
class StoreServer {
 public:
  // `keys`: the learner's pair; its public key is the only one admitted.
  static absl::StatusOr<std::unique_ptr<StoreServer>> Start(
      const std::string& host, int port, const std::optional<wire::CurveKeyPair>& keys);
  ~StoreServer();

 private:
  StoreServer() = default;
  void Serve();

  zmq::context_t ctx_{1};
  std::unique_ptr<wire::ZapHandler> zap_;  // with keys; destroyed before ctx_
  zmq::socket_t router_;
  zmq::socket_t stop_pull_, stop_push_;  // inproc: wakes the serving thread to end it
  std::thread thread_;
};

// A client, one per rank. Every call waits at most `timeout` (a get or wait for keys no rank
// has set yet: the rendezvous never completed) and then throws gloo::IoException naming the
// store's address and the keys still missing, which gloo's rendezvous passes on as its failure.
class StoreClient final : public gloo::rendezvous::Store {
 public:
  // `keys`: the learner's pair, as the server's (a CURVE client needs the server's public key).
  StoreClient(const std::string& host, int port, absl::Duration timeout,
              const std::optional<wire::CurveKeyPair>& keys);

  void set(const std::string& key, const std::vector<char>& data) override;
  std::vector<char> get(const std::string& key) override;
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

  // The value of `key` if some rank has set it, without waiting.
  std::optional<std::vector<char>> TryGet(const std::string& key);

 private:
  // The same, the store's answer awaited until `deadline` (wait's own deadline, so that a store
  // that vanished does not stretch it to the client's timeout).
  std::optional<std::vector<char>> TryGet(const std::string& key, absl::Time deadline);
  // One request and its reply; throws gloo::IoException when no reply comes by `deadline`.
  std::vector<zmq::message_t> Ask(std::vector<zmq::message_t> request, absl::Time deadline);
  void Connect();

  std::string address_;
  absl::Duration timeout_;
  std::optional<wire::CurveKeyPair> keys_;
  zmq::context_t ctx_{1};
  zmq::socket_t dealer_;
};

}  // namespace diloco::island
