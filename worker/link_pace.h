// How long a link's answers may take before a request on it counts as lost: the bytes ahead of
// the answer at the link's measured rate, within [interval, cap]. Retries on a live connection
// are a safety net (ZeroMQ over TCP loses nothing while the connection lives; a reconnect or a
// restarted shard re-asks everything by itself), so a retry timer must not fire while the first
// answer is merely still crossing a slow link: at 10 Mbit/s a join of 12.8M parameters took 4-5
// minutes instead of 45 s because every fragment was asked for (and sent) six times over
// (benchmarks/wan/RESULTS.md, "WAN emulation").
//
// The rate of one direction is measured from what arrives while answers are awaited: each
// message's bytes over the time since the previous arrival (which includes the peer's own work:
// an underestimate, so the timers err long). Until a first measurement the assumed rate is a
// floor below any link the system supports (SyncOptions::link_rate_floor), so the first answer
// is never asked for again while it crosses. Transport-free: the caller passes the times.
#pragma once

#include <algorithm>
#include <cstdint>

#include "absl/time/time.h"
#include "common/ema.h"

namespace diloco::worker {

class LinkPace {
 public:
  explicit LinkPace(double floor_bytes_per_s = 125e3) : floor_(floor_bytes_per_s) {}

  // Arrivals smaller than this measure the peer's latency more than the link (an ack after the
  // peer's work): they start the next gap but give no sample.
  static constexpr uint64_t kMinSampleBytes = 64 << 10;

  // `bytes` arrived at `now`; `awaiting`: answers were expected since the previous arrival, so
  // the gap measures the link (not an idle connection).
  void Arrived(uint64_t bytes, absl::Time now, bool awaiting) {
    if (awaiting && bytes >= kMinSampleBytes && last_ != absl::InfinitePast() && now > last_) {
      const double sample = bytes / absl::ToDoubleSeconds(now - last_);
      rate_ = Ema(rate_, sample, 0.3);
    }
    last_ = now;
  }
  // A gap the link was idle in: the next arrival's gap starts here.
  void Idle(absl::Time now) { last_ = now; }

  // The measured rate, or the floor before any measurement.
  double bytes_per_s() const { return rate_ > 0 ? rate_ : floor_; }
  bool measured() const { return rate_ > 0; }

  // How long to wait for an answer with `bytes_ahead` bytes to cross before it: their time at
  // the link's rate, at least `interval`, at most `cap`.
  absl::Duration Wait(uint64_t bytes_ahead, absl::Duration interval, absl::Duration cap) const {
    const absl::Duration t = absl::Seconds(bytes_ahead / bytes_per_s());
    return std::min(std::max(t, interval), std::max(cap, interval));
  }

 private:
  double floor_;
  double rate_ = 0;  // EMA of the samples; 0 = none yet
  absl::Time last_ = absl::InfinitePast();
};

}  // namespace diloco::worker
