// One learner made of several ranks: the collectives its ranks run, over gloo's TCP transport
// (the CPU collective library). GPU ranks average their gradients with NCCL instead
// (worker/model/cuda/nccl_ranks.h), whose unique id reaches them through ShareFromRank0; gloo
// still carries the island's control (Broadcast, CheckSame) for them.
//
// Join() is the rendezvous: each rank publishes a description of itself (host, address, pid and
// a config line: the model's fingerprint and every setting the ranks must share), waits for all
// ranks, and compares every rank's config with rank 0's, so that ranks built from another model
// or other flags are refused before any collective, each rank naming the rank and the setting
// that differ (a refusing rank 0, whose process holds the store, leaves only once every rank has
// read the descriptions). Then the ranks connect a full mesh of gloo pairs.
//
// Every collective waits at most the spec's timeout. A rank that dies is found by the others
// either at once (its connections close: SIGKILL, a crash) or when the timeout expires (a node
// that vanished); the error names the rank lost, matched by its address where gloo's message
// gives one. An island that lost a rank cannot go on: its generation ends and the launcher
// starts a new one (docs/worker.md, "Islands").
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/island/island_spec.h"

namespace gloo {
class Context;
}

namespace diloco::island {

class StoreServer;
class StoreClient;

class Island {
 public:
  // `config`: space-separated key=value settings that every rank must share.
  static absl::StatusOr<std::unique_ptr<Island>> Join(const IslandSpec& spec,
                                                      const std::string& config);
  ~Island();

  int rank() const { return spec_.rank; }
  int size() const { return spec_.size; }
  const IslandSpec& spec() const { return spec_; }

  // In place: the mean over ranks of `v` (every rank ends with the same bytes).
  absl::Status AllReduceMean(std::span<float> v);
  // In place: rank 0's `v` on every rank. `timeout` overrides the spec's (rank 0's join to the
  // shards may take longer than a step).
  absl::Status Broadcast(std::span<float> v, absl::Duration timeout = absl::ZeroDuration());
  absl::Status Broadcast(std::span<int64_t> v, absl::Duration timeout = absl::ZeroDuration());
  // Every rank's `checksum` of its parameters must be rank 0's: otherwise an error naming the
  // ranks that differ (the same error on every rank).
  absl::Status CheckSame(uint64_t checksum, int64_t step);
  // Rank 0's `bytes` on every rank (other ranks' `bytes` are ignored), through the rendezvous
  // store under `key`: what must reach the ranks before a collective library of theirs exists
  // (NCCL's unique id). A rank waits at most the spec's timeout, then an error naming the key.
  absl::StatusOr<std::string> ShareFromRank0(const std::string& key, const std::string& bytes);

  // Time spent in AllReduceMean and its calls: the island's cost per step over a lone worker.
  absl::Duration reduce_time() const { return reduce_time_; }
  uint64_t reduces() const { return reduces_; }

 private:
  struct Peer {
    std::string host, ip;
    int64_t pid = 0;
  };
  Island() = default;
  // A failed collective as a status naming the lost rank(s).
  absl::Status Lost(const char* what, const std::exception& e) const;

  IslandSpec spec_;
  std::vector<Peer> peers_;  // by rank
  std::unique_ptr<StoreServer> server_;
  std::unique_ptr<StoreClient> store_;
  std::shared_ptr<gloo::Context> ctx_;
  absl::Duration reduce_time_;
  uint64_t reduces_ = 0;
};

// The rendezvous store's keys: rank r's description, rank r's word that it has read every
// rank's (a refusing rank 0 keeps its store until every rank has said so), and what
// ShareFromRank0 shares.
std::string RankKey(int r);
std::string ReadKey(int r);
std::string ShareKey(const std::string& key);

// Splits "k=v k=v ..." configs and names the first key whose value differs, "" when equal.
std::string FirstDifference(const std::string& mine, const std::string& theirs);

}  // namespace diloco::island
