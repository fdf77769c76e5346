// The buffers that hold pushes' deltas while they are outstanding, shared by all fragments.
//
// A push's fp32 delta (anchor - local, the fragment's own order) must live from the step that
// takes it until its answer: the I/O thread encodes it and undoes its error feedback if it ends
// unapplied, and a keep adoption takes it out of the local model (worker/training_sync.h). A
// buffer per fragment held for the whole run costs 4 B/param; with streamed pushes only the few
// fragments whose push is in flight need one. The pool hands a buffer out when a push is taken
// and gets it back when the push ends, so a learner holds about (pushes in flight) / F of the
// model in deltas, and at most what every fragment pushing at once needs.
//
// Buffers are not zeroed: their pages are touched when a delta is first written, so a learner
// that has not pushed yet (during its join) holds none. Best fit on Take; when no free buffer
// fits, the largest free one is dropped before a new one is made, so the pool never holds more
// buffers than were in use at once. Training thread only (no locking): the I/O thread reads a
// buffer between the push's hand-over and the arrival that ends it, as before.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace diloco::worker {

class DeltaPool {
 public:
  struct Buffer {
    std::unique_ptr<float[]> data;
    uint64_t capacity = 0;  // floats
  };

  // A buffer of at least n floats, contents undefined.
  Buffer Take(uint64_t n);
  void Give(Buffer b);

  uint64_t held_bytes() const { return held_bytes_; }  // free and in use
  uint32_t buffers() const { return buffers_; }        // free and in use
  uint32_t in_use() const { return buffers_ - static_cast<uint32_t>(free_.size()); }

 private:
  std::vector<Buffer> free_;
  uint64_t held_bytes_ = 0;
  uint32_t buffers_ = 0;
};

}  // namespace diloco::worker
