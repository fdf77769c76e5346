#include "worker/push_codec.h"

#include <algorithm>
#include <cassert>
#include <cstring>

#include "common/checksum.h"
#include "kernels/codec_table.h"

namespace diloco::worker {

EncodedPush EncodePush(kernels::Codec codec, std::span<const float> delta, std::span<float> error,
                       float decay) {
  const bool exact = error.empty();  // an exact codec without a residual: Q(delta) = delta
  assert(!exact || kernels::EntryOf(codec).exact);
  const wire::PayloadLayout layout(codec, delta.size());
  auto bytes = std::make_shared<wire::Bytes>(layout.bytes());
  EncodedPush push;
  for (const wire::PayloadChunk& c : layout) {
    const std::span<uint8_t> out(bytes->data() + c.byte_offset, c.bytes);
    if (!exact && decay != 1.0f)
      for (float& e : error.subspan(c.offset, c.count)) e *= decay;
    auto s = exact ? kernels::Encode(codec, delta.subspan(c.offset, c.count), out)
                   : kernels::ErrorFeedbackEncode(codec, delta.subspan(c.offset, c.count),
                                                  error.subspan(c.offset, c.count), out);
    if (!s.ok()) {  // a non-finite delta: the model diverged; do not poison the shard
      if (!exact) std::fill_n(error.begin() + c.offset, c.count, 0.0f);
      std::memset(out.data(), 0, out.size());
      push.poisoned = true;
      ++push.poisoned_chunks;
    }
    push.checksums.push_back(Checksum64(out.data(), out.size()));
  }
  push.bytes = std::move(bytes);
  return push;
}

void UndoErrorFeedback(kernels::Codec codec, std::span<const float> delta, std::span<float> error,
                       const EncodedPush& push, float decay) {
  if (push.poisoned || !push.bytes || error.empty()) return;
  for (const wire::PayloadChunk& c : wire::PayloadLayout(codec, delta.size())) {
    std::span<float> e = error.subspan(c.offset, c.count);
    for (uint64_t i = 0; i < c.count; ++i) e[i] -= delta[c.offset + i];
    (void)kernels::DecodeAccumulate(
        codec, std::span<const uint8_t>(push.bytes->data() + c.byte_offset, c.bytes), 1.0f, e);
    if (decay != 1.0f)
      for (float& v : e) v /= decay;
  }
}

float EfDecayFor(kernels::Codec codec, float option) {
  if (option > 0) return option;
  return kernels::IsTopK(codec.kind) ? kTopKEfDecay : 1.0f;
}

}  // namespace diloco::worker
