#include "worker/push_codec.h"

#include <algorithm>
#include <cstring>

#include "common/checksum.h"

namespace diloco::worker {

EncodedPush EncodePush(kernels::Codec codec, std::span<const float> delta, std::span<float> error) {
  const uint64_t numel = delta.size();
  const uint64_t chunk = wire::ChunkElements(codec.block);
  size_t total = 0;
  for (uint64_t off = 0; off < numel; off += chunk)
    total += kernels::EncodedSize(codec, std::min(chunk, numel - off));
  auto bytes = std::make_shared<wire::Bytes>(total);
  EncodedPush push;
  size_t pos = 0;
  for (uint64_t off = 0; off < numel; off += chunk) {
    const uint64_t n = std::min(chunk, numel - off);
    const size_t size = kernels::EncodedSize(codec, n);
    auto s = kernels::ErrorFeedbackEncode(codec, delta.subspan(off, n), error.subspan(off, n),
                                          std::span<uint8_t>(bytes->data() + pos, size));
    if (!s.ok()) {  // a non-finite delta: the model diverged; do not poison the shard
      std::fill(error.begin() + off, error.begin() + off + n, 0.0f);
      std::memset(bytes->data() + pos, 0, size);
      push.poisoned = true;
      ++push.poisoned_chunks;
    }
    push.checksums.push_back(Checksum64(bytes->data() + pos, size));
    pos += size;
  }
  push.bytes = std::move(bytes);
  return push;
}

void UndoErrorFeedback(kernels::Codec codec, std::span<const float> delta, std::span<float> error,
                       const EncodedPush& push) {
  if (push.poisoned || !push.bytes) return;
  const uint64_t numel = delta.size();
  const uint64_t chunk = wire::ChunkElements(codec.block);
  size_t pos = 0;
  for (uint64_t off = 0; off < numel; off += chunk) {
    const uint64_t n = std::min(chunk, numel - off);
    const size_t size = kernels::EncodedSize(codec, n);
    std::span<float> e = error.subspan(off, n);
    for (uint64_t i = 0; i < n; ++i) e[i] -= delta[off + i];
    (void)kernels::DecodeAccumulate(codec, std::span<const uint8_t>(push.bytes->data() + pos, size),
                                    1.0f, e);
    pos += size;
  }
}

}  // namespace diloco::worker
