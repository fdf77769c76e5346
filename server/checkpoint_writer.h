// Runs a shard's checkpoint writes off its event loop, one at a time.
//
// The loop builds a Job (the checkpoint's id, round counter, dedup table copied, and views of
// the fragments' theta and momentum), submits it and keeps serving; the writer thread calls
// CheckpointStore::Write and signals `wake_fd()` when the result is ready, which the loop takes
// with TakeResult(). The views borrow the shard's buffers: the shard must not mutate a
// fragment whose data is in the job until the result is taken (server/shard.cc freezes those
// fragments: their next round closes only after the write). With `threaded = false` the job
// runs inside Submit (tests that want synchronous checkpoints, and the shutdown checkpoint).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "storage/checkpoint_store.h"

namespace diloco::server {

class CheckpointWriter {
 public:
  struct Job {
    uint64_t id = 0;
    uint64_t rounds = 0;
    storage::OptimizerMeta optimizer;
    std::vector<storage::FragmentView> fragments;  // borrowed, frozen until the result is taken
    std::vector<storage::DedupEntry> dedup;        // owned copy
    bool sync = true;
  };
  struct Result {
    uint64_t id = 0;
    absl::Status status;
    double write_ms = 0;  // time inside CheckpointStore::Write
    uint64_t bytes = 0;   // tensor bytes the job handed over (params + momentum)
  };
  // Test hook: runs on the writing thread before each write (e.g. blocks on a gate).
  // Test hook, run on the writing thread before each write: a non-OK status is that write's
  // result, the store untouched (a disk failing on demand, without a small file system).
  using Hook = std::function<absl::Status()>;

  CheckpointWriter(storage::CheckpointStore* store, bool threaded, Hook before_write = {});
  ~CheckpointWriter();  // waits for the write in flight, then joins
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  // Starts `job`. Precondition: !busy().
  void Submit(Job job);
  // A job was submitted and its result not yet taken.
  bool busy() const { return busy_; }
  // The finished job's result, or nullopt while it is still being written (or none was given).
  std::optional<Result> TakeResult();
  // Blocks until the job in flight is written, then returns its result (nullopt when idle).
  std::optional<Result> WaitResult();
  // Blocks until the job in flight is written; its result stays for TakeResult.
  void WaitDone();
  // Readable (an eventfd) while a result waits to be taken; -1 when not threaded.
  int wake_fd() const { return wake_fd_; }

 private:
  Result Run(const Job& job);
  void Loop();

  storage::CheckpointStore* store_;
  Hook before_write_;
  bool busy_ = false;  // loop thread only
  int wake_fd_ = -1;
  std::mutex mu_;
  std::condition_variable cv_;
  std::optional<Job> job_;        // guarded by mu_: submitted, not yet picked up
  std::optional<Result> result_;  // guarded by mu_: written, not yet taken
  bool stop_ = false;             // guarded by mu_
  std::thread thread_;            // last: started after everything above exists
};

}  // namespace diloco::server
