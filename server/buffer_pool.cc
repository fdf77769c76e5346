#include "server/buffer_pool.h"

namespace diloco::server {

std::shared_ptr<wire::Bytes> BufferPool::Take(uint64_t bytes) {
  for (auto it = kept_.begin(); it != kept_.end(); ++it) {
    if (it->use_count() == 1 && (*it)->size() == bytes) {
      auto b = std::move(*it);
      kept_.erase(it);
      return b;
    }
  }
  ++fresh_;
  return std::make_shared<wire::Bytes>(bytes);
}

void BufferPool::Give(std::shared_ptr<wire::Bytes> b) {
  if (!b || b->size() > keep_bytes_) return;
  // Over budget: make room by freeing the oldest kept buffers nothing else holds (they may be
  // of a size no fragment asks for any more); if still over, drop `b`.
  for (auto it = kept_.begin(); it != kept_.end() && kept_bytes() + b->size() > keep_bytes_;)
    it = it->use_count() == 1 ? kept_.erase(it) : it + 1;
  if (kept_bytes() + b->size() <= keep_bytes_) kept_.push_back(std::move(b));
}

uint64_t BufferPool::kept_bytes() const {
  uint64_t n = 0;
  for (const auto& b : kept_) n += b->size();
  return n;
}

}  // namespace diloco::server
