// The codec half of the fuzz target: a parsed Push, or a FragmentUpdate of quantized updates,
// goes through the payload check the shard and the worker run (wire::CheckEncodedPayload) and,
// when that passes, through the decoder into a scratch accumulator. A check that let through
// what the decoder cannot read (a top-k index past its block) shows up as a crash under ASan.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/codec.h"
#include "schema/payload_check.h"
#include "schema/payload_layout.h"
#include "schema/wire.h"

namespace diloco::fuzz {

// Fragments this large are not worth a fuzz input's time (and would not fit its size limit).
inline constexpr uint64_t kMaxFuzzElements = uint64_t{1} << 20;

enum class PayloadFate { kNotAPayload, kRefused, kDecoded };

inline PayloadFate DecodePayload(const wire::Message& m, absl::Status* why = nullptr) {
  const wire::Header& h = m.header();
  const bool chain = m.type() == wire::MsgType::FragmentUpdate && h.codec() != 0;
  if ((m.type() != wire::MsgType::Push && !chain) || h.num_elements() > kMaxFuzzElements)
    return PayloadFate::kNotAPayload;
  const kernels::Codec codec{static_cast<kernels::CodecKind>(h.codec()), h.block(), h.topk()};
  const uint64_t count =
      chain && h.version() > h.base_version() ? h.version() - h.base_version() : 1;
  absl::Status st = kernels::ValidateCodec(codec);
  if (st.ok()) st = wire::CheckEncodedPayload(m, codec, h.num_elements(), count);
  if (why) *why = st;
  if (!st.ok()) return PayloadFate::kRefused;
  std::vector<float> acc(h.num_elements(), 0.0f);
  const wire::PayloadLayout layout(codec, h.num_elements());
  for (uint64_t i = 0; i < m.num_payloads(); ++i) {
    const wire::PayloadChunk c = layout.chunk(i % layout.chunks());
    const std::span<float> dst(acc.data() + c.offset, c.count);
    if (!kernels::DecodeAccumulate(codec, m.payload(i), 0.5f, dst).ok()) {
      __builtin_trap();  // the check passed: the decoder must accept it too
    }
  }
  return PayloadFate::kDecoded;
}

}  // namespace diloco::fuzz
