// Buffers a shard's fragments share for what only some of them need at a time: a round's
// accumulator (taken when its first push is merged, given back when the round closes) and the
// second copy of theta a round writes while the published one is still sent (copy on write).
//
// Why: a per-fragment accumulator and snapshot cost 8 bytes per parameter however few rounds
// are open; pooled, a fragment holds them only while its round is open or its old theta is
// still on the wire, so the shard's steady state is theta + momentum (8 B/param) plus the
// fragments in flight. The pool keeps at most `keep_bytes` of given-back buffers for reuse
// (fresh pages cost ~10x a copy, TOOLCHAIN.md); beyond that a buffer is freed when its last
// holder (a send, a snapshot) lets go. A kept buffer is handed out only once nothing else
// holds it.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "schema/transport.h"

namespace diloco::server {

class BufferPool {
 public:
  explicit BufferPool(uint64_t keep_bytes) : keep_bytes_(keep_bytes) {}

  // A buffer of exactly `bytes` bytes, contents unspecified: a kept one nothing else holds, or
  // a fresh (zeroed) one.
  std::shared_ptr<wire::Bytes> Take(uint64_t bytes);
  // Hands `b` back (it may still be held by sends or a snapshot): kept while the pool holds
  // under keep_bytes, else dropped.
  void Give(std::shared_ptr<wire::Bytes> b);

  uint64_t kept_bytes() const;
  uint64_t fresh_allocations() const { return fresh_; }

 private:
  uint64_t keep_bytes_;
  uint64_t fresh_ = 0;
  std::vector<std::shared_ptr<wire::Bytes>> kept_;
};

// The float view of a pooled buffer (operator new aligns it for floats).
inline std::span<float> Floats(wire::Bytes& b) {
  return {reinterpret_cast<float*>(b.data()), b.size() / sizeof(float)};
}

}  // namespace diloco::server
