#include "kernels/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/codec_format.h"
#include "kernels/quant_math.h"
#include "kernels/reference_topk.h"
#include "kernels/topk.h"

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

// Quantizes x[0, n) into `out`; x must be finite.
void EncodeFinite(Codec c, const float* x, size_t n, uint8_t* out) {
  if (IsTopK(c.kind)) return TopKEncode(c, x, n, out);
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

// The i-th decoded value (before any weight).
float DecodeOne(Codec c, const uint8_t* in, size_t n, size_t i) {
  switch (c.kind) {
    case CodecKind::kFp32: {
      float f;
      std::memcpy(&f, in + 4 * i, 4);
      return f;
    }
    case CodecKind::kBf16: {
      uint16_t h;
      std::memcpy(&h, in + 2 * i, 2);
      return qm::FloatFromBf16(h);
    }
    default:
      break;
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

absl::Status CheckScales(Codec c, std::span<const uint8_t> in, size_t n) {
  if (IsTopK(c.kind)) return kernels::internal::CheckTopK(c, in, n);
  for (size_t b = 0; b < internal::NumBlocks(c, n); ++b) {
    const float s = LoadScale(in.data(), b);
    if (!(s >= 0.0f) || qm::AbsBits(s) >= qm::kInfBits) {
      return absl::InvalidArgumentError("encoded delta has a negative or non-finite block scale");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status Encode(Codec c, std::span<const float> x, std::span<uint8_t> out) {
  if (absl::Status st = internal::CheckSizes(c, x.size(), out.size()); !st.ok()) return st;
  for (float v : x) {
    if (qm::AbsBits(v) >= qm::kInfBits) return internal::NonFiniteError("input");
  }
  EncodeFinite(c, x.data(), x.size(), out.data());
  return absl::OkStatus();
}

absl::Status Decode(Codec c, std::span<const uint8_t> in, std::span<float> out) {
  if (absl::Status st = internal::CheckSizes(c, out.size(), in.size()); !st.ok()) return st;
  if (absl::Status st = CheckScales(c, in, out.size()); !st.ok()) return st;
  if (IsTopK(c.kind)) {
    TopKDecode(c, in.data(), out.size(), 1.0f, false, out.data());
    return absl::OkStatus();
  }
  for (size_t i = 0; i < out.size(); ++i) out[i] = DecodeOne(c, in.data(), out.size(), i);
  return absl::OkStatus();
}

absl::Status DecodeAccumulate(Codec c, std::span<const uint8_t> in, float weight,
                              std::span<float> acc) {
  if (absl::Status st = internal::CheckSizes(c, acc.size(), in.size()); !st.ok()) return st;
  if (absl::Status st = CheckScales(c, in, acc.size()); !st.ok()) return st;
  if (IsTopK(c.kind)) {
    TopKDecode(c, in.data(), acc.size(), weight, true, acc.data());
    return absl::OkStatus();
  }
  for (size_t i = 0; i < acc.size(); ++i) {
    acc[i] = acc[i] + weight * DecodeOne(c, in.data(), acc.size(), i);
  }
  return absl::OkStatus();
}

absl::Status ErrorFeedbackEncode(Codec c, std::span<const float> delta, std::span<float> err,
                                 std::span<uint8_t> out) {
  const size_t n = delta.size();
  if (err.size() != n) return absl::InvalidArgumentError("err and delta differ in size");
  if (absl::Status st = internal::CheckSizes(c, n, out.size()); !st.ok()) return st;
  std::vector<float> e(n);
  for (size_t i = 0; i < n; ++i) {
    e[i] = err[i] + delta[i];
    if (qm::AbsBits(e[i]) >= qm::kInfBits) return internal::NonFiniteError("err + delta");
  }
  EncodeFinite(c, e.data(), n, out.data());
  if (IsTopK(c.kind)) {
    std::vector<float> sent(n);
    TopKDecode(c, out.data(), n, 1.0f, false, sent.data());
    for (size_t i = 0; i < n; ++i) err[i] = e[i] - sent[i];
    return absl::OkStatus();
  }
  for (size_t i = 0; i < n; ++i) err[i] = e[i] - DecodeOne(c, out.data(), n, i);
  return absl::OkStatus();
}

void NesterovStep(const NesterovParams& p, std::span<float> theta, std::span<float> m,
                  std::span<const float> d) {
  for (size_t i = 0; i < theta.size(); ++i) {
    m[i] = p.mu * m[i] + d[i];
    theta[i] = theta[i] - p.lr * (d[i] + p.mu * m[i]);
  }
}

void AdamWStep(const AdamWParams& p, int64_t step, std::span<float> param,
               std::span<const float> grad, std::span<float> m, std::span<float> v) {
  const float bc1 = 1.0f - std::pow(p.beta1, static_cast<float>(step));
  const float bc2 = 1.0f - std::pow(p.beta2, static_cast<float>(step));
  for (size_t i = 0; i < param.size(); ++i) {
    const float g = grad[i];
    m[i] = p.beta1 * m[i] + (1.0f - p.beta1) * g;
    v[i] = p.beta2 * v[i] + (1.0f - p.beta2) * g * g;
    const float mhat = m[i] / bc1;
    const float vhat = v[i] / bc2;
    param[i] = param[i] - p.lr * (mhat / (std::sqrt(vhat) + p.eps) + p.weight_decay * param[i]);
  }
}

void Delta(std::span<const float> anchor, std::span<const float> local, std::span<float> delta) {
  for (size_t i = 0; i < delta.size(); ++i) delta[i] = anchor[i] - local[i];
}

void LerpAdopt(std::span<const float> global, std::span<float> local, float alpha) {
  for (size_t i = 0; i < local.size(); ++i) local[i] = global[i] + alpha * (local[i] - global[i]);
}

}  // namespace diloco::kernels::ref
