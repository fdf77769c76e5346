#include "kernels/thread_pool.h"

#include <algorithm>
#include <memory>

namespace diloco::kernels {

ThreadPool::ThreadPool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { WorkerLoop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  for (std::thread& t : workers_) t.join();
}

void ThreadPool::Drain(std::unique_lock<std::mutex>& lock) {
  while (next_ < tasks_) {
    const int i = next_++;
    const absl::FunctionRef<void(int)>* fn = fn_;
    lock.unlock();
    (*fn)(i);
    lock.lock();
    if (--pending_ == 0) done_.notify_all();
  }
}

void ThreadPool::WorkerLoop() {
  std::unique_lock<std::mutex> lock(mu_);
  unsigned long seen = generation_;
  while (true) {
    wake_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    Drain(lock);
  }
}

void ThreadPool::Run(int tasks, absl::FunctionRef<void(int)> fn) {
  std::unique_lock<std::mutex> owner(run_mu_, std::try_to_lock);
  if (tasks <= 1 || workers_.empty() || !owner.owns_lock()) {
    for (int i = 0; i < tasks; ++i) fn(i);
    return;
  }
  std::unique_lock<std::mutex> lock(mu_);
  fn_ = &fn;
  tasks_ = tasks;
  next_ = 0;
  pending_ = tasks;
  ++generation_;
  wake_.notify_all();
  Drain(lock);
  done_.wait(lock, [&] { return pending_ == 0; });
  fn_ = nullptr;
  tasks_ = 0;
  next_ = 0;
}

namespace {

std::mutex g_pool_mu;
std::unique_ptr<ThreadPool>& PoolSlot() {
  static auto* pool = new std::unique_ptr<ThreadPool>();
  return *pool;
}

ThreadPool& Pool() {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  std::unique_ptr<ThreadPool>& slot = PoolSlot();
  if (!slot) {
    const int hw = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    slot = std::make_unique<ThreadPool>(std::min(hw, 8));
  }
  return *slot;
}

}  // namespace

void SetKernelThreads(int threads) {
  std::lock_guard<std::mutex> lock(g_pool_mu);
  PoolSlot() = std::make_unique<ThreadPool>(std::max(1, threads));
}

int KernelThreads() { return Pool().threads(); }

void ParallelFor(size_t units, size_t min_units, absl::FunctionRef<void(size_t, size_t)> fn) {
  if (units == 0) return;
  ThreadPool& pool = Pool();
  min_units = std::max<size_t>(min_units, 1);
  if (pool.threads() == 1 || units < 2 * min_units) {
    fn(0, units);
    return;
  }
  // A few ranges per thread so that a thread slowed by a neighbour on the core does not hold up
  // the whole call, but large enough to stream.
  const size_t max_tasks = static_cast<size_t>(pool.threads()) * 4;
  const size_t tasks = std::min(max_tasks, units / min_units);
  const size_t per = (units + tasks - 1) / tasks;
  pool.Run(static_cast<int>(tasks), [&](int t) {
    const size_t lo = static_cast<size_t>(t) * per;
    const size_t hi = std::min(units, lo + per);
    if (lo < hi) fn(lo, hi);
  });
}

}  // namespace diloco::kernels
