#include "schema/payload_check.h"

#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"
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
  const uint64_t chunk = ChunkElements(codec.block);
  if (h.chunk_elements() != chunk)
    return WireError(ErrorCode::BadLength,
                     absl::StrCat("chunk of ", h.chunk_elements(), " elements, expected ", chunk));
  const uint64_t per_payload = (numel + chunk - 1) / chunk;
  const uint64_t frames = per_payload * count;
  if (m.num_payloads() != frames)
    return WireError(ErrorCode::BadLength,
                     absl::StrCat(m.num_payloads(), " payload frames, expected ", frames));
  for (uint64_t i = 0; i < frames; ++i) {
    const uint64_t at = i % per_payload * chunk;
    const uint64_t n = std::min(chunk, numel - at);
    auto p = m.payload(i);
    if (p.size() != kernels::EncodedSize(codec, n))
      return WireError(
          ErrorCode::BadLength,
          absl::StrCat("frame ", i, " has ", p.size(), " bytes, codec ", kernels::CodecName(codec),
                       " needs ", kernels::EncodedSize(codec, n)));
    const uint64_t blocks = (n + codec.block - 1) / codec.block;
    bool ok = true;
    switch (codec.kind) {
      case kernels::CodecKind::kFp32:
        ok = AllFinite(p.data(), n);
        break;
      case kernels::CodecKind::kBf16:
        ok = Bf16AllFinite(p.data(), n);
        break;
      case kernels::CodecKind::kFp8E4M3:
        ok = AllFinite(p.data(), blocks) && Fp8AllFinite(p.data() + 4 * blocks, n);
        break;
      case kernels::CodecKind::kInt8:
      case kernels::CodecKind::kInt4:
        ok = AllFinite(p.data(), blocks);
        break;
    }
    if (!ok)
      return WireError(ErrorCode::BadCodec, absl::StrCat("frame ", i, " holds non-finite values"));
  }
  return absl::OkStatus();
}

}  // namespace diloco::wire
