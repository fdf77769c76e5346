// The worker's sync client: joins every shard, and afterwards keeps the local model in step
// with the global one without ever blocking the training thread.
//
// Threads: the training thread calls AfterStep() once per inner step; it only copies (delta
// out, adopted fragment in) and queues work. An I/O thread owns one DEALER socket per shard,
// runs error feedback + quantisation, sends pushes, keeps each push until the shard acks it
// (resending with the same sequence number after a reconnect or a shard restart), sends
// heartbeats, and hands arrived fragments back to the training thread.
//
// Per fragment, at most one push is outstanding: the next delta is taken only after the
// previous push's round has been adopted (or refused), so no delta is ever counted twice.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/manifest.h"
#include "common/plan.h"
#include "kernels/codec.h"

namespace diloco::worker {

struct SyncOptions {
  std::vector<std::string> servers;  // endpoint of shard i at index i
  uint32_t worker_id = 0;
  uint64_t generation = 0;  // 0: derived from the clock at start
  uint32_t num_fragments = 4;
  kernels::Codec codec;
  uint32_t inner_steps = 50;  // H
  float adopt_alpha = 0.0f;   // local = global + alpha*(local - global)
  bool dylu = false;          // Dynamic Local Updates: H_w = H * v_w / v_fleet_max
  bool stream = true;         // stagger fragments' pushes over the H steps
  absl::Duration heartbeat = absl::Milliseconds(500);
  absl::Duration shard_timeout = absl::Seconds(3);  // silence before reconnecting
  absl::Duration resend_after = absl::Seconds(5);   // no ack: send the push again
  absl::Duration backoff_max = absl::Seconds(4);
  size_t max_unacked_pushes = 64;
};

struct SyncStats {
  uint64_t pushes = 0, resends = 0, adoptions = 0, stale = 0, duplicates = 0, errors = 0;
  uint64_t bytes_sent = 0, bytes_received = 0;
  uint64_t reconnects = 0;
  double mean_staleness = 0;     // rounds between a push's base and the adopted version
  uint32_t inner_steps_now = 0;  // current H_w
  std::vector<uint64_t> versions;  // adopted version per fragment
};

class SyncClient {
 public:
  static absl::StatusOr<std::unique_ptr<SyncClient>> Create(const SyncOptions& options,
                                                            const Manifest& manifest);
  ~SyncClient();

  // Hello to every shard, upload `params` as theta(0) where a fragment has none, pull every
  // fragment and overwrite `params` with the pulled values. Blocks up to `deadline`.
  absl::Status Join(std::span<float> params, absl::Duration deadline);

  // After each inner step, on the training thread. Adopts fragments that have arrived and
  // queues pushes that are due. Never waits on the network.
  void AfterStep(std::span<float> params, uint64_t tokens, absl::Duration step_time);

  SyncStats stats() const;
  uint64_t plan_fingerprint() const;
  // The last adopted global model, flat (fragments not yet adopted hold theta(0)).
  std::span<const float> global_params() const;

  struct Impl;

 private:
  explicit SyncClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace diloco::worker
