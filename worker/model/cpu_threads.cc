// A pool of CpuThreads() - 1 threads beside the caller; parts are handed out under one mutex
// (a few per call, so the lock is never contended for long) and every wait blocks.
#include "worker/model/cpu_threads.h"

#include <cblas.h>

#include <algorithm>
#include <memory>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"

namespace diloco::model {
namespace {

thread_local bool in_part = false;  // this thread is running a part: ParallelFor runs inline
thread_local int my_slot = 0;       // 0 on the caller, i on the pool's thread i

class Pool {
 public:
  explicit Pool(int width) {
    for (int i = 1; i < width; ++i)
      threads_.emplace_back([this, i] {
        my_slot = i;
        Serve();
      });
  }
  ~Pool() {
    {
      absl::MutexLock l(&mu_);
      stop_ = true;
    }
    for (auto& t : threads_) t.join();
  }
  int width() const { return static_cast<int>(threads_.size()) + 1; }

  void Run(int parts, absl::FunctionRef<void(int, int)> fn) {
    absl::MutexLock l(&mu_);
    fn_ = &fn;
    parts_ = parts;
    next_ = 0;
    unfinished_ = parts;
    while (next_ < parts_) RunOne();  // the caller takes parts too
    mu_.Await(absl::Condition(
        +[](int* n) { return *n == 0; }, &unfinished_));
    parts_ = 0;
    fn_ = nullptr;
  }

 private:
  // Runs the next part with mu_ released; mu_ is held on entry and on return.
  void RunOne() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int i = next_++;
    const absl::FunctionRef<void(int, int)>* fn = fn_;
    mu_.Unlock();
    in_part = true;
    (*fn)(i, my_slot);
    in_part = false;
    mu_.Lock();
    --unfinished_;
  }

  void Serve() {
    absl::MutexLock l(&mu_);
    for (;;) {
      mu_.Await(absl::Condition(this, &Pool::HasWork));
      if (stop_) return;
      RunOne();
    }
  }
  bool HasWork() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stop_ || next_ < parts_; }

  absl::Mutex mu_;
  const absl::FunctionRef<void(int, int)>* fn_ ABSL_GUARDED_BY(mu_) = nullptr;
  int parts_ ABSL_GUARDED_BY(mu_) = 0;
  int next_ ABSL_GUARDED_BY(mu_) = 0;
  int unfinished_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

std::unique_ptr<Pool>& ThePool() {
  static auto* pool = new std::unique_ptr<Pool>(std::make_unique<Pool>(1));
  return *pool;
}

}  // namespace

void SetCpuThreads(int n) {
  openblas_set_num_threads(1);
  auto& pool = ThePool();
  if (n < 1) n = 1;
  if (pool->width() != n) pool = std::make_unique<Pool>(n);
}

int CpuThreads() { return ThePool()->width(); }

void ParallelForSlots(int parts, absl::FunctionRef<void(int, int)> fn) {
  if (parts <= 0) return;
  if (parts == 1 || in_part || CpuThreads() == 1) {
    for (int i = 0; i < parts; ++i) fn(i, my_slot);
    return;
  }
  ThePool()->Run(parts, fn);
}

void ParallelFor(int parts, absl::FunctionRef<void(int)> fn) {
  ParallelForSlots(parts, [&](int part, int) { fn(part); });
}

int PartsFor(double flops) {
  const int width = CpuThreads();
  if (width == 1) return 1;
  return static_cast<int>(std::clamp(flops / 1e6, 1.0, double(kPartsPerThread * width)));
}

}  // namespace diloco::model
