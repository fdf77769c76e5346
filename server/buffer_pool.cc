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
    Touch(b, bytes);
    return b;
  }
  ++fresh_;
  auto b = std::make_shared<wire::Bytes>();
  b->reserve(std::max(bytes, slot_bytes_));  // untouched until used: costs no resident memory
  b->resize(bytes);
  Touch(b, bytes);
  return b;
}

void BufferPool::Give(std::shared_ptr<wire::Bytes> b, absl::Time now) {
  if (!b) return;
  const uint64_t resident = Resident(b);
  // Over budget: make room by freeing the oldest kept buffers nothing else holds (they may be
  // of a size no fragment asks for any more); if still over, drop `b`.
  if (resident <= keep_bytes_) FreeOver(keep_bytes_ - resident);
  if (kept_bytes() + resident <= keep_bytes_) {
    kept_.push_back({std::move(b), now, resident});
  } else {
    touched_.erase(b.get());  // freed here unless a send still holds it: the pool forgets it
  }
}

void BufferPool::Trim(absl::Time now) {
  std::erase_if(kept_,
                [&](const Kept& k) { return k.buffer.use_count() == 1 && now - k.given > idle_; });
  absl::erase_if(touched_, [](const auto& e) { return e.second.buffer.expired(); });
}

void BufferPool::SetBudget(uint64_t keep_bytes) {
  keep_bytes_ = keep_bytes;
  FreeOver(keep_bytes_);
}

void BufferPool::FreeOver(uint64_t budget) {
  for (auto it = kept_.begin(); it != kept_.end() && kept_bytes() > budget;) {
    if (it->buffer.use_count() == 1) {
      touched_.erase(it->buffer.get());
      it = kept_.erase(it);
    } else {
      ++it;
    }
  }
}

uint64_t BufferPool::Resident(const std::shared_ptr<wire::Bytes>& b) const {
  auto it = touched_.find(b.get());
  const bool ours = it != touched_.end() && it->second.buffer.lock() == b;
  return std::max<uint64_t>(ours ? it->second.bytes : 0, b->size());
}

void BufferPool::Touch(const std::shared_ptr<wire::Bytes>& b, uint64_t bytes) {
  Touched& t = touched_[b.get()];
  if (t.buffer.lock() != b) t = {b, 0};  // a new buffer at a dead one's address
  t.bytes = std::max(t.bytes, bytes);
}

uint64_t BufferPool::kept_bytes() const {
  uint64_t n = 0;
  for (const auto& k : kept_) n += k.resident;
  return n;
}

}  // namespace diloco::server
