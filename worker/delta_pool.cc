#include "worker/delta_pool.h"

#include <algorithm>
#include <utility>

namespace diloco::worker {

DeltaPool::Buffer DeltaPool::Take(uint64_t n) {
  auto fit = free_.end();
  for (auto it = free_.begin(); it != free_.end(); ++it)
    if (it->capacity >= n && (fit == free_.end() || it->capacity < fit->capacity)) fit = it;
  if (fit != free_.end()) {
    Buffer b = std::move(*fit);
    free_.erase(fit);
    return b;
  }
  if (!free_.empty()) {  // none fits: drop the largest free one instead of growing the pool
    auto largest =
        std::max_element(free_.begin(), free_.end(),
                         [](const Buffer& a, const Buffer& b) { return a.capacity < b.capacity; });
    held_bytes_ -= largest->capacity * sizeof(float);
    --buffers_;
    free_.erase(largest);
  }
  Buffer b{std::make_unique_for_overwrite<float[]>(n), n};
  held_bytes_ += n * sizeof(float);
  ++buffers_;
  return b;
}

void DeltaPool::Give(Buffer b) {
  if (b.data) free_.push_back(std::move(b));
}

}  // namespace diloco::worker
