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
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/manifest.h"
#include "common/plan.h"
#include "worker/sync_options.h"

namespace diloco::worker {

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
  // rounds of pushes sent together close one after another). Then tells every shard this
  // worker leaves (docs/protocol.md, "Leaving"), waiting for the answers up to kLeaveWait (or
  // `timeout`, if shorter): the shards stop counting it at once instead of after their worker
  // timeout. Nothing is sent after Drain; a client destroyed without it does not leave (the
  // shards time it out, as a crashed worker).
  absl::Status Drain(std::span<float> params, absl::Duration timeout);
  static constexpr absl::Duration kLeaveWait = absl::Seconds(2);
  // Shards that answered this worker's Leave (0 before Drain).
  uint32_t shards_left() const;

  // The training loop's progress, for the heartbeats (schema/learner_figures.h): step, loss
  // (moving average), tokens/s, utilization and device; leave what is not known unset. Either
  // thread; the last call's figures are sent.
  struct Progress {
    std::optional<uint64_t> step;
    std::optional<float> loss, tokens_per_s, utilization;
    std::string device;
  };
  void SetProgress(const Progress& p);

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
