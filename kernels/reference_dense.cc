#include "kernels/reference_dense.h"

#include <algorithm>
#include <cstring>

#include "kernels/codec_format.h"
#include "kernels/quant_math.h"

namespace diloco::kernels::ref {
namespace {

float QMax(CodecKind k) {
  switch (k) {
    case CodecKind::kInt8:
      return qm::kInt8Max;
    case CodecKind::kInt4:
      return qm::kInt4Max;
    default:
      return qm::kFp8Max;
  }
}

float LoadScale(const uint8_t* in, size_t b) {
  float s;
  std::memcpy(&s, in + b * sizeof(float), sizeof(s));
  return s;
}

// The i-th decoded value (before any weight).
float DecodeOne(Codec c, const uint8_t* in, size_t n, size_t i) {
  if (c.kind == CodecKind::kFp32) {
    float f;
    std::memcpy(&f, in + 4 * i, 4);
    return f;
  }
  if (c.kind == CodecKind::kBf16) {
    uint16_t h;
    std::memcpy(&h, in + 2 * i, 2);
    return qm::FloatFromBf16(h);
  }
  const float scale = LoadScale(in, i / c.block);
  const uint8_t* payload = in + internal::PayloadOffset(c, n);
  if (c.kind == CodecKind::kInt8) {
    return qm::DequantInt(static_cast<int8_t>(payload[i]), scale);
  }
  if (c.kind == CodecKind::kInt4) {
    return qm::DequantInt(qm::Int4FromNibble(payload[i / 2] >> (4 * (i % 2))), scale);
  }
  return qm::FloatFromFp8E4M3(payload[i]) * scale;
}

}  // namespace

void DenseEncode(Codec c, const float* x, size_t n, uint8_t* out) {
  if (c.kind == CodecKind::kFp32) {
    if (n > 0) std::memcpy(out, x, n * sizeof(float));
    return;
  }
  if (c.kind == CodecKind::kBf16) {
    for (size_t i = 0; i < n; ++i) {
      const uint16_t h = qm::Bf16FromFloat(x[i]);
      std::memcpy(out + 2 * i, &h, 2);
    }
    return;
  }
  uint8_t* payload = out + internal::PayloadOffset(c, n);
  const float qmax = QMax(c.kind);
  for (size_t b = 0; b < internal::NumBlocks(c, n); ++b) {
    const size_t lo = b * c.block;
    const size_t hi = std::min(n, lo + c.block);
    uint32_t abs_bits = 0;
    for (size_t i = lo; i < hi; ++i) abs_bits = std::max(abs_bits, qm::AbsBits(x[i]));
    const float scale = qm::ScaleFromAbsBits(abs_bits, qmax);
    std::memcpy(out + b * sizeof(float), &scale, sizeof(scale));
    for (size_t i = lo; i < hi; ++i) {
      if (c.kind == CodecKind::kInt8) {
        payload[i] = scale == 0.0f ? 0 : static_cast<uint8_t>(qm::QuantInt(x[i], scale, qmax));
      } else if (c.kind == CodecKind::kFp8E4M3) {
        payload[i] = scale == 0.0f ? 0 : qm::Fp8E4M3FromFloat(qm::Clamp(x[i] / scale, -qmax, qmax));
      } else {
        const uint8_t nib = scale == 0.0f ? 0 : qm::Int4Nibble(qm::QuantInt(x[i], scale, qmax));
        if (i % 2 == 0) {
          payload[i / 2] = nib;
        } else {
          payload[i / 2] |= static_cast<uint8_t>(nib << 4);
        }
      }
    }
  }
}

void DenseDecode(Codec c, const uint8_t* in, size_t n, float w, bool acc, float* out) {
  for (size_t i = 0; i < n; ++i) {
    out[i] = acc ? out[i] + w * DecodeOne(c, in, n, i) : DecodeOne(c, in, n, i);
  }
}

}  // namespace diloco::kernels::ref
