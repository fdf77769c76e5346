// The small reusable thread pool behind the fast CPU kernels. Threads are created once (at first
// use, or by SetKernelThreads) and sleep on a condition variable between calls; the calling
// thread always works too. One kernel call owns the pool at a time: a second caller that finds
// it busy (another server thread, or a nested call) runs its work inline instead of waiting, so
// the pool can never deadlock and never oversubscribes the cores.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/functional/function_ref.h"

namespace diloco::kernels {

class ThreadPool {
 public:
  // `threads` counts the caller: threads - 1 workers are started.
  explicit ThreadPool(int threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int threads() const { return static_cast<int>(workers_.size()) + 1; }
  // Runs fn(i) for every i in [0, tasks), spread over the pool; returns when all are done.
  void Run(int tasks, absl::FunctionRef<void(int)> fn);

 private:
  void WorkerLoop();
  // Takes and runs tasks of the current job until none are left. Called with mu_ held.
  void Drain(std::unique_lock<std::mutex>& lock);

  std::mutex run_mu_;  // held by the caller that owns the pool
  std::mutex mu_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const absl::FunctionRef<void(int)>* fn_ = nullptr;  // guarded by mu_
  int tasks_ = 0;                                     // guarded by mu_
  int next_ = 0;                                      // guarded by mu_
  int pending_ = 0;                                   // guarded by mu_
  unsigned long generation_ = 0;                      // guarded by mu_
  bool stop_ = false;                                 // guarded by mu_
  std::vector<std::thread> workers_;
};

// Threads used by the fast kernels (the caller included); the default is
// min(hardware threads, 8). Call SetKernelThreads at start-up, before any kernel runs: it
// replaces the pool and must not race with kernel calls.
void SetKernelThreads(int threads);
int KernelThreads();

// Splits [0, units) into contiguous ranges and runs fn(begin, end) on the pool. Spans smaller
// than 2 * min_units (or a 1-thread pool) run inline on the caller in one call.
void ParallelFor(size_t units, size_t min_units, absl::FunctionRef<void(size_t, size_t)> fn);

}  // namespace diloco::kernels
