#include "kernels/reference.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/codec_format.h"
#include "kernels/codec_table.h"
#include "kernels/quant_math.h"

namespace diloco::kernels::ref {
namespace {

float LoadScale(const uint8_t* in, size_t b) {
  float s;
  std::memcpy(&s, in + b * sizeof(float), sizeof(s));
  return s;
}

// Block codecs: every scale a finite number >= 0 (compared as floats, so -0 passes); the others
// by their table entry's decoder check.
absl::Status CheckScales(const CodecEntry& e, Codec c, std::span<const uint8_t> in, size_t n) {
  if (!e.has_scales) return e.decode_check(c, in, n);
  for (size_t b = 0; b < internal::NumBlocks(c, n); ++b) {
    const float s = LoadScale(in.data(), b);
    if (!(s >= 0.0f) || qm::AbsBits(s) >= qm::kInfBits) {
      return absl::InvalidArgumentError("encoded delta has a negative or non-finite block scale");
    }
  }
  return absl::OkStatus();
}

absl::Status DecodeImpl(Codec c, std::span<const uint8_t> in, float weight, bool accumulate,
                        std::span<float> out) {
  if (absl::Status st = internal::CheckSizes(c, out.size(), in.size()); !st.ok()) return st;
  const CodecEntry& e = EntryOf(c);
  if (absl::Status st = CheckScales(e, c, in, out.size()); !st.ok()) return st;
  e.ref_decode(c, in.data(), out.size(), weight, accumulate, out.data());
  return absl::OkStatus();
}

}  // namespace

absl::Status Encode(Codec c, std::span<const float> x, std::span<uint8_t> out) {
  if (absl::Status st = internal::CheckSizes(c, x.size(), out.size()); !st.ok()) return st;
  for (float v : x) {
    if (qm::AbsBits(v) >= qm::kInfBits) return internal::NonFiniteError("input");
  }
  EntryOf(c).ref_encode(c, x.data(), x.size(), out.data());
  return absl::OkStatus();
}

absl::Status Decode(Codec c, std::span<const uint8_t> in, std::span<float> out) {
  return DecodeImpl(c, in, 1.0f, /*accumulate=*/false, out);
}

absl::Status DecodeAccumulate(Codec c, std::span<const uint8_t> in, float weight,
                              std::span<float> acc) {
  return DecodeImpl(c, in, weight, /*accumulate=*/true, acc);
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
  const CodecEntry& entry = EntryOf(c);
  entry.ref_encode(c, e.data(), n, out.data());
  std::vector<float> sent(n);
  entry.ref_decode(c, out.data(), n, 1.0f, false, sent.data());
  for (size_t i = 0; i < n; ++i) err[i] = e[i] - sent[i];
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
