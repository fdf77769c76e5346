// The worker's sync client: joins every shard, and afterwards keeps the local model in step
// with the global one without ever blocking the training thread. Design: docs/worker.md.
//
// Threads: the training thread calls AfterStep() once per inner step; it only copies (delta
// out, adopted fragment in, a theta(0) snapshot when a shard asks for one) and queues work. An
// I/O thread owns one DEALER socket per shard, runs error feedback + quantisation, sends pushes,
// keeps each push until the shard acks it (resending with the same sequence number after a
// reconnect or a shard restart), sends heartbeats on a separate control connection per shard,
// and hands arrived fragments back.
//
// Per fragment, at most one push is outstanding: the next delta is taken only after the
// previous push has been answered (Applied, Duplicate, Stale or refused), so no delta is ever
// counted twice, and the pushes kept for resending are bounded by the number of fragments.
// A push that was not applied (Stale, refused) has its quantisation undone from the error
// feedback residual, so nothing is lost or double-counted there either.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
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
  // Adoption of a fragment's new global values (the join always takes them as they are):
  //   kKeep: local = global + (local - local_at_push), the inner steps taken since the push
  //          survive (default; with replace a fast worker beside a slow one loses ~45% of its
  //          steps, docs/worker.md);
  //   kLerp: local = global + adopt_alpha * (local - global); alpha 0 replaces.
  enum class Adopt { kKeep, kLerp };
  Adopt adopt = Adopt::kKeep;
  float adopt_alpha = 0.0f;
  // Deterministic mode: AfterStep returns only once the pushes it queued are answered and their
  // results adopted (or lockstep_timeout passed), so a run is a fixed sequence of steps and
  // rounds whatever the timing (tests; with quorum = all workers, synchronous DiLoCo).
  bool lockstep = false;
  // Error feedback: a push's quantisation error goes into the next push. Off only to measure
  // what it is worth (the convergence study).
  bool error_feedback = true;
  absl::Duration lockstep_timeout = absl::Seconds(60);
  bool dylu = false;   // Dynamic Local Updates: H_w = H * v_w / v_fleet_max
  bool stream = true;  // stagger fragments' pushes over the H steps
  absl::Duration heartbeat = absl::Milliseconds(500);
  // Heartbeats on a second connection per shard, so that on a slow link they never wait
  // behind a fragment (which would read as a dead shard and restart the transfer). Off only to
  // show that failure (tests/worker).
  bool control_channel = true;
  absl::Duration shard_timeout = absl::Seconds(3);  // silence before reconnecting
  // Retries on a live connection are a safety net only (a reconnect re-sends everything at
  // once): each unanswered push or join is re-sent after resend_after / join_retry, then at
  // doubling intervals up to retry_max, so that on a slow link where a fragment takes longer
  // than the first interval to cross, retries do not pile copies of it onto the link.
  absl::Duration resend_after = absl::Seconds(5);  // no ack: send the push again
  absl::Duration backoff_max = absl::Seconds(4);
  // CURVE, all three or none (Z85 text, see schema/curve.h): the shards' public key and this
  // worker's key pair, whose public half the shards list for this worker_id.
  std::string curve_server_key, curve_public_key, curve_secret_key;
  absl::Duration join_retry = absl::Seconds(1);  // re-ask for an unjoined fragment
  absl::Duration retry_max = absl::Seconds(60);
  // Neither comes before the bytes ahead of its answer could have crossed the link at its
  // measured rate (worker/link_pace.h); before a first measurement the link is assumed this
  // slow (bytes/s; 1 Mbit/s, below any link the system is meant for), so a slow link is not
  // filled with copies of what is still crossing it.
  double link_rate_floor = 125e3;
  // DyLU needs the fleet's step time, which the shards send in Welcome (and, once they do, in
  // Heartbeat replies); with dylu on, a Hello is repeated this often to refresh it.
  absl::Duration fleet_refresh = absl::Seconds(1);
  size_t max_events = 4096;  // TakeEvents() backlog; older events are dropped beyond it
  // Test only: the first N sends of fragment 0's first push (seq 1) carry one flipped payload
  // byte under the true checksums, as if damaged on the way (the shard answers BadChecksum).
  uint32_t test_corrupt_push_sends = 0;
};

struct SyncStats {
  uint64_t pushes = 0, applied = 0, resends = 0, adoptions = 0, stale = 0, duplicates = 0;
  uint64_t refused = 0, errors = 0;
  uint64_t bytes_sent = 0, bytes_received = 0;
  uint64_t reconnects = 0, shard_restarts = 0;
  uint64_t join_asks = 0;     // fragments asked for while joining (the first asks and any re-asks)
  uint32_t joined = 0;        // fragments joined (pulled once)
  uint32_t unacked = 0;       // pushes waiting for their answer
  double mean_staleness = 0;  // EMA of rounds merged between a push's base and its round
  uint64_t max_staleness = 0;
  uint32_t inner_steps_now = 0;   // current H_w
  double step_time_us = 0;        // this worker's EMA inner step time
  double fleet_step_time_us = 0;  // fastest worker's, as the shards last said (0: unknown)
  double after_step_us = 0;       // EMA cost of AfterStep on the training thread
  double after_step_max_us = 0;
  std::vector<uint64_t> versions;  // adopted version per fragment
  // Downloads adopted: whole fp32 fragments, and quantized update chains reconstructed on the
  // last adopted values (docs/protocol.md, "Quantized downloads"). A reconstruction whose
  // checksum differs from the shard's (never expected) is counted and the fragment pulled whole.
  uint64_t updates_full = 0, updates_delta = 0, download_mismatches = 0;
  // From a push's send to the adoption of the values that answer it, on the training thread:
  // the moving average, the most, and the latest (up to kRecentLatencies, oldest first).
  double push_to_adopt_ms = 0, push_to_adopt_max_ms = 0;
  std::vector<double> recent_push_to_adopt_ms;
  static constexpr size_t kRecentLatencies = 256;
};

// Things machines want to follow one by one (worker_main writes them as JSON lines).
struct SyncEvent {
  enum Kind { kPush, kApplied, kDuplicate, kStale, kRefused, kShardRestart };
  Kind kind = kPush;
  uint32_t shard = 0, fragment = 0;
  uint64_t seq = 0, base_version = 0, version = 0;
  std::string detail;  // kRefused: the shard's message
};
const char* SyncEventName(SyncEvent::Kind k);

class SyncClient {
 public:
  static absl::StatusOr<std::unique_ptr<SyncClient>> Create(const SyncOptions& options,
                                                            const Manifest& manifest);
  ~SyncClient();

  // Hello to every shard, upload `params` as theta(0) where a fragment has none, pull every
  // fragment and overwrite `params` with the pulled values. Blocks up to `deadline`.
  // OK: every fragment joined. DeadlineExceeded: not all shards answered in time; the client
  // keeps joining in the background and AfterStep() takes each fragment as it arrives (an
  // unjoined fragment is trained locally, never pushed, and overwritten when it joins).
  // FailedPrecondition: a shard refuses this worker's plan or model (retrying will not help).
  absl::Status Join(std::span<float> params, absl::Duration deadline);
  bool joined() const;

  // After each inner step, on the training thread. Adopts fragments that have arrived and
  // queues pushes that are due. Never waits on the network.
  void AfterStep(std::span<float> params, uint64_t tokens, absl::Duration step_time);
  // The same, with the parameters reached range by range: params(offset, n) is elements
  // [offset, offset + n), asked for only on a step that reads or writes them (an adoption, a due
  // push, a theta(0) request) and only for the pieces of the fragments concerned, so a GPU
  // trainer copies those pieces to the host and back (Trainer::ParamRange), not the model.
  using ParamsFn = absl::FunctionRef<std::span<float>(uint64_t offset, uint64_t n)>;
  void AfterStep(ParamsFn params, uint64_t tokens, absl::Duration step_time);

  // Clean stop, on the training thread: takes no new pushes, waits until every push is
  // answered, and adopts what arrives meanwhile into `params`. Gives up when `timeout` passes
  // with no answer arriving (a shard still answering is slow, not gone: at real sizes the
  // rounds of pushes sent together close one after another).
  absl::Status Drain(std::span<float> params, absl::Duration timeout);

  SyncStats stats() const;
  std::vector<SyncEvent> TakeEvents();
  uint64_t plan_fingerprint() const;
  // The last adopted global model, flat (fragments not yet adopted hold zeros).
  std::span<const float> global_params() const;

  struct Impl;

 private:
  explicit SyncClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace diloco::worker
