// When a shard hands its frame heap back (wire::TrimFrameHeap): once its loop has received no
// payload (heartbeats, pulls and Stats carry none) for `quiet` after at least `min_bytes` of
// payload frames since the last trim (or of quantized updates sent: heap buffers too). A burst of
// workers joining (every fragment uploaded and pulled in fp32) leaves up to a few hundred MiB of
// freed frames mapped, which at 124M parameters is ~2 bytes per parameter on top of theta and
// momentum; pushes that keep coming never leave the loop without payload that long, so a busy shard
// keeps its warm pages (the reason they are kept) and a quiet one returns them.
#pragma once

#include <cstdint>

#include "absl/time/time.h"

namespace diloco::server {

class HeapTrimPolicy {
 public:
  HeapTrimPolicy(uint64_t min_bytes, absl::Duration quiet) : min_bytes_(min_bytes), quiet_(quiet) {}

  void Received(uint64_t bytes, absl::Time now) {
    since_trim_ += bytes;
    last_ = now;
  }
  bool Due(absl::Time now) const { return since_trim_ >= min_bytes_ && now - last_ >= quiet_; }
  void Trimmed() { since_trim_ = 0; }

 private:
  const uint64_t min_bytes_;
  const absl::Duration quiet_;
  uint64_t since_trim_ = 0;
  absl::Time last_ = absl::InfinitePast();
};

}  // namespace diloco::server
