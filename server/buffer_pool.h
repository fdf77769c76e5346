// Buffers a shard's fragments share for what only some of them need at a time: a round's
// accumulator (taken when its first push is merged; when the round closes it is given back, or
// it becomes the new theta and the old theta, once no send holds it, is given back instead).
//
// Why: a per-fragment accumulator and snapshot cost 8 bytes per parameter however few rounds
// are open; pooled, a fragment holds them only while its round is open or its old theta is
// still on the wire, so the shard's steady state is theta + momentum (8 B/param) plus the
// buffers its rounds actually use. Given-back buffers are kept for reuse, because fresh pages
// are the dominant cost of a round at real sizes (the kernel zeroes every page on first touch:
// a 124M shard whose pool kept two exact-size buffers spent 62% of its CPU samples clearing
// pages, perf), up to `keep_bytes`. A kept buffer nobody took for `idle` is freed, so a burst of
// rounds closing together (non-streamed pushes) keeps its buffers while the bursts go on and
// returns them once rounds close one at a time again. A kept buffer is handed out only once
// nothing else holds it.
//
// The budget counts resident bytes: the most a buffer was ever used for (its touched pages),
// not what it reserves. The shard sets it to what its memory bound leaves beside theta, momentum
// and the download state (SetBudget), so that what it keeps for speed never pushes it over the
// bound; rounds that need more in a burst get fresh buffers, freed when given back.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "schema/transport.h"

namespace diloco::server {

class BufferPool {
 public:
  // Fresh buffers reserve `slot_bytes` (the largest fragment's bytes) whatever they are taken
  // for, so that any kept buffer serves any fragment: fragments differ in size (tensors are
  // bin-packed), and a pool matching exact sizes reused almost nothing.
  BufferPool(uint64_t keep_bytes, absl::Duration idle, uint64_t slot_bytes = 0)
      : keep_bytes_(keep_bytes), slot_bytes_(slot_bytes), idle_(idle) {}

  // A buffer of exactly `bytes` bytes, contents unspecified: the smallest kept one with room
  // that nothing else holds (among equals the most recently given back: its pages are the
  // likeliest to be warm), or a fresh (zeroed) one.
  std::shared_ptr<wire::Bytes> Take(uint64_t bytes);
  // Hands `b` back at `now` (it may still be held by sends or a snapshot): kept while the pool
  // holds under keep_bytes, else dropped.
  void Give(std::shared_ptr<wire::Bytes> b, absl::Time now);
  // Frees the kept buffers nothing holds that were given back before now - idle.
  void Trim(absl::Time now);
  // A new budget: kept buffers nothing holds are freed, oldest first, until the rest fit (those
  // still held by a send stay until they are free and the next Give or SetBudget comes).
  void SetBudget(uint64_t keep_bytes);

  uint64_t budget() const { return keep_bytes_; }
  uint64_t kept_bytes() const;  // resident bytes of the kept buffers (the most each held)
  uint64_t fresh_allocations() const { return fresh_; }

 private:
  struct Kept {
    std::shared_ptr<wire::Bytes> buffer;
    absl::Time given;
    uint64_t resident;
  };
  // The most bytes a buffer this pool handed out has held (its touched pages); a buffer that
  // died outside the pool is told apart by its expired weak pointer.
  struct Touched {
    std::weak_ptr<wire::Bytes> buffer;
    uint64_t bytes;
  };
  uint64_t Resident(const std::shared_ptr<wire::Bytes>& b) const;
  void Touch(const std::shared_ptr<wire::Bytes>& b, uint64_t bytes);
  void FreeOver(uint64_t budget);  // frees free kept buffers, oldest first, until under budget

  uint64_t keep_bytes_;
  uint64_t slot_bytes_;
  absl::Duration idle_;
  uint64_t fresh_ = 0;
  std::vector<Kept> kept_;  // oldest given back first
  absl::flat_hash_map<const wire::Bytes*, Touched> touched_;
};

// The float view of a pooled buffer (operator new aligns it for floats).
inline std::span<float> Floats(wire::Bytes& b) {
  return {reinterpret_cast<float*>(b.data()), b.size() / sizeof(float)};
}
inline std::span<const float> Floats(const wire::Bytes& b) {
  return {reinterpret_cast<const float*>(b.data()), b.size() / sizeof(float)};
}

}  // namespace diloco::server
