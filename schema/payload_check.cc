#include "schema/payload_check.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/codec_format.h"
#include "kernels/topk.h"
#include "schema/payload_layout.h"
#include "schema/transport.h"

namespace diloco::wire {
namespace {

bool AllFinite(const uint8_t* p, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    float v;
    std::memcpy(&v, p + 4 * i, 4);
    if (!std::isfinite(v)) return false;
  }
  return true;
}

bool Bf16AllFinite(const uint8_t* p, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    uint16_t v;
    std::memcpy(&v, p + 2 * i, 2);
    if ((v & 0x7F80u) == 0x7F80u) return false;  // exponent all ones: Inf or NaN
  }
  return true;
}

bool Fp8AllFinite(const uint8_t* p, size_t count) {
  for (size_t i = 0; i < count; ++i)
    if ((p[i] & 0x7Fu) == 0x7Fu) return false;  // e4m3: S.1111.111 is NaN, no Inf
  return true;
}

}  // namespace

absl::Status CheckEncodedPayload(const Message& m, kernels::Codec codec, uint64_t numel,
                                 uint64_t count) {
  const auto& h = m.header();
  if (h.num_elements() != numel)
    return WireError(ErrorCode::BadLength, absl::StrCat("payload of ", h.num_elements(),
                                                        " elements for a fragment of ", numel));
  const PayloadLayout layout(codec, numel);
  if (h.chunk_elements() != layout.chunk_elements())
    return WireError(ErrorCode::BadLength,
                     absl::StrCat("chunk of ", h.chunk_elements(), " elements, expected ",
                                  layout.chunk_elements()));
  const uint64_t frames = layout.chunks() * count;
  if (m.num_payloads() != frames)
    return WireError(ErrorCode::BadLength,
                     absl::StrCat(m.num_payloads(), " payload frames, expected ", frames));
  for (uint64_t i = 0; i < frames; ++i) {
    const PayloadChunk c = layout.chunk(i % layout.chunks());
    const uint64_t n = c.count;
    auto p = m.payload(i);
    if (p.size() != c.bytes)
      return WireError(ErrorCode::BadLength,
                       absl::StrCat("frame ", i, " has ", p.size(), " bytes, codec ",
                                    kernels::CodecName(codec), " needs ", c.bytes));
    const uint64_t blocks = kernels::internal::NumBlocks(codec, n);
    bool ok = true;
    switch (codec.kind) {
      case kernels::CodecKind::kFp32:
        ok = AllFinite(p.data(), n);
        break;
      case kernels::CodecKind::kBf16:
        ok = Bf16AllFinite(p.data(), n);
        break;
      case kernels::CodecKind::kFp8E4M3:
        ok = AllFinite(p.data(), blocks) &&
             Fp8AllFinite(p.data() + kernels::internal::PayloadOffset(codec, n), n);
        break;
      case kernels::CodecKind::kInt8:
      case kernels::CodecKind::kInt4:
        ok = AllFinite(p.data(), blocks);
        break;
      case kernels::CodecKind::kTopKPacked:
      case kernels::CodecKind::kTopK:
        if (absl::Status st = kernels::internal::CheckTopK(codec, p, n); !st.ok())
          return WireError(ErrorCode::BadCodec, absl::StrCat("frame ", i, ": ", st.message()));
        break;
    }
    if (!ok)
      return WireError(ErrorCode::BadCodec, absl::StrCat("frame ", i, " holds non-finite values"));
  }
  return absl::OkStatus();
}

}  // namespace diloco::wire
