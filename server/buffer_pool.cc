#include "server/buffer_pool.h"

#include <algorithm>

namespace diloco::server {

std::shared_ptr<wire::Bytes> BufferPool::Take(uint64_t bytes) {
  // Best fit: the smallest free buffer with room, the most recently given back among equals.
  auto best = kept_.rend();
  for (auto it = kept_.rbegin(); it != kept_.rend(); ++it) {
    if (it->buffer.use_count() != 1 || it->buffer->capacity() < bytes) continue;
    if (best == kept_.rend() || it->buffer->capacity() < best->buffer->capacity()) best = it;
  }
  if (best != kept_.rend()) {
    auto b = std::move(best->buffer);
    kept_.erase(std::next(best).base());
    b->resize(bytes);  // within capacity: no reallocation, no fresh pages beyond its last use
    return b;
  }
  ++fresh_;
  auto b = std::make_shared<wire::Bytes>();
  b->reserve(std::max(bytes, slot_bytes_));  // untouched until used: costs no resident memory
  b->resize(bytes);
  return b;
}

void BufferPool::Give(std::shared_ptr<wire::Bytes> b, absl::Time now) {
  if (!b || b->capacity() > keep_bytes_) return;
  // Over budget: make room by freeing the oldest kept buffers nothing else holds (they may be
  // of a size no fragment asks for any more); if still over, drop `b`.
  for (auto it = kept_.begin(); it != kept_.end() && kept_bytes() + b->capacity() > keep_bytes_;)
    it = it->buffer.use_count() == 1 ? kept_.erase(it) : it + 1;
  if (kept_bytes() + b->capacity() <= keep_bytes_) kept_.push_back({std::move(b), now});
}

void BufferPool::Trim(absl::Time now) {
  std::erase_if(kept_,
                [&](const Kept& k) { return k.buffer.use_count() == 1 && now - k.given > idle_; });
}

uint64_t BufferPool::kept_bytes() const {
  uint64_t n = 0;
  for (const auto& k : kept_) n += k.buffer->capacity();
  return n;
}

}  // namespace diloco::server
