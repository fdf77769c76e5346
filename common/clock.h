// Time source for logic that waits (grace windows, liveness, retries), so tests drive it with a
// fake clock: the shard's rounds and the worker's per-shard sessions both take one.
#pragma once

#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace diloco {

class Clock {
 public:
  virtual ~Clock() = default;
  virtual absl::Time Now() const = 0;
};

class SystemClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
};

class FakeClock final : public Clock {
 public:
  // With a step set, every read moves the clock on by it first: code that measures its own
  // work (Shard::Tick's close budget) sees that work take time.
  absl::Time Now() const override { return now_ += step_; }
  void Advance(absl::Duration d) { now_ += d; }
  void AdvanceOnEachRead(absl::Duration step) { step_ = step; }

 private:
  mutable absl::Time now_ = absl::UnixEpoch() + absl::Hours(1);
  absl::Duration step_ = absl::ZeroDuration();
};

}  // namespace diloco
