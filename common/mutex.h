// Mutex, MutexLock and CondVar: std::mutex and std::condition_variable carrying Abseil's
// thread-safety annotations, so that clang's -Wthread-safety checks every ABSL_GUARDED_BY
// member and ThreadSanitizer sees the locking.
//
// Why not absl::Mutex, which has both: Debian builds Abseil without ThreadSanitizer, so in a TSan
// build of this project absl::Mutex's synchronisation happens inside an uninstrumented library
// and is invisible; TSan then reports every access it guards as a data race. std::mutex locks
// through pthread, which TSan intercepts. The names and calls follow absl::Mutex's, so code reads
// the same either way.
#pragma once

#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"

namespace diloco {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { m_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { m_.unlock(); }

 private:
  friend class CondVar;
  std::mutex m_;
};

// Holds `mu` for its lifetime.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

class CondVar {
 public:
  // With `mu` held: releases it, waits until signalled, `timeout` passes or a spurious wake-up,
  // and holds it again on return.
  void WaitWithTimeout(Mutex* mu, absl::Duration timeout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    std::unique_lock<std::mutex> lock(mu->m_, std::adopt_lock);
    cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout));
    lock.release();  // still held: the caller's lock owns it
  }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace diloco
