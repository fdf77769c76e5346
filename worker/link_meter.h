// A link's rate in one direction, from the transfers that crossed it: the bytes of a window of
// transfers over the time at least one of them was crossing (the union of their intervals).
//
// Why not bytes over the gap between arrivals (worker/link_pace.h)? On a fast link an update
// crosses in milliseconds and the link then idles until the next round closes: the gaps measure
// the rounds, not the link, and read a 1 Gbit/s link as a few MB/s. Why the union? A worker's
// connections to several shards share its access link: while two transfers overlap, each one
// alone takes twice as long, and their own durations would halve the rate.
//
// The intervals are the worker's own clock at both ends (worker/shard_session.cc):
//   up:   a push's send -> its Queued answer (the shard took the last byte; + half a round trip);
//   down: an Applied update's start -> its arrival, where the start is the push's Queued answer
//         plus the time the shard says it held the push before answering (the header's
//         held_us): the one-way delays cancel, so no clock is shared with the shard.
// Transport-free: the caller passes the times.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/time/time.h"

namespace diloco::worker {

class LinkMeter {
 public:
  // A window closes once it holds this many transfers and bytes: a sample then is a few
  // transfers' worth, so one transfer's start-up (a round trip) weighs little.
  static constexpr size_t kWindowTransfers = 4;
  static constexpr uint64_t kWindowBytes = 256 << 10;

  // What a transfer is taken to have lasted at least: the sync client's I/O loop sees
  // arrivals a pass (up to 5 ms) at a time, so on a fast link a push's Queued answer and its
  // update can arrive in the same pass, and the down interval comes out empty or reversed by
  // the shard's own time (held_us) within it: such a transfer was faster than the meter can
  // tell, and counts as this long.
  static constexpr absl::Duration kResolution = absl::Milliseconds(1);

  // `bytes` crossed over [start, end] (shorter than kResolution: [end - kResolution, end]).
  void Add(absl::Time start, absl::Time end, uint64_t bytes);

  // Bytes per second: the moving average of the closed windows' rates; 0 until one closed.
  double bytes_per_s() const { return rate_; }
  bool measured() const { return rate_ > 0; }
  uint64_t samples() const { return samples_; }

 private:
  struct Transfer {
    absl::Time start, end;
  };
  std::vector<Transfer> window_;
  uint64_t window_bytes_ = 0;
  double rate_ = 0;
  uint64_t samples_ = 0;
};

}  // namespace diloco::worker
