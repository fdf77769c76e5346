#include "server/push_guard.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <span>

#include "kernels/codec.h"

namespace diloco::server {
namespace {

double SumOfSquares(std::span<const float> x) {
  double s = 0;
  for (float v : x) s += static_cast<double>(v) * v;
  return s;
}

}  // namespace

double MedianCap::Median() const {
  if (ring_.empty()) return 0;
  std::array<double, kWindow> v;
  std::copy(ring_.begin(), ring_.end(), v.begin());
  const auto mid = v.begin() + (ring_.size() - 1) / 2;
  std::nth_element(v.begin(), mid, v.begin() + ring_.size());
  return *mid;
}

MedianCap::Admitted MedianCap::Admit(double v) {
  Admitted a;
  a.value = v;
  if (!on()) return a;
  if (ring_.size() >= kMinSamples) {
    if (const double median = Median(); median > 0) {
      a.limit = cap_ * median;
      if (v > a.limit) {
        a.value = a.limit;
        a.capped = true;
      }
    }
  }
  if (ring_.size() < kWindow) {
    ring_.push_back(a.value);
  } else {
    ring_[next_] = a.value;
    next_ = (next_ + 1) % kWindow;
  }
  return a;
}

double CappedWeightFactor(WeightScheme scheme, double ratio) {
  switch (scheme) {
    case WeightScheme::kTokensSqOverSteps:  // (r t)^2 / (r s) = r t^2 / s
    case WeightScheme::kTokens:             // r t
      return ratio;
    case WeightScheme::kUniform:
      break;
  }
  return 1.0;
}

GuardedDecode DecodeGuarded(kernels::Codec codec, const wire::Message& m, uint64_t numel,
                            const RoundMerge::Target& t, MedianCap* norm,
                            std::vector<float>& scratch) {
  GuardedDecode r;
  const wire::PayloadLayout layout(codec, numel);
  const auto merge = [&](float scale) {
    for (const wire::PayloadChunk& c : layout) {
      const std::span<float> dst(t.values + c.offset, c.count);
      const auto st = t.overwrite
                          ? kernels::Decode(codec, m.payload(c.index), dst)
                          : kernels::DecodeAccumulate(codec, m.payload(c.index), scale, dst);
      r.ok &= st.ok();
    }
  };
  if (norm == nullptr || !norm->on()) {
    merge(t.scale);
    return r;
  }
  // The norm first: an overwrite decodes in place (and is scaled there if clipped); an
  // accumulation decodes each chunk through the scratch buffer, then merges.
  double sum_sq = 0;
  if (t.overwrite) merge(t.scale);
  for (const wire::PayloadChunk& c : layout) {
    std::span<float> values(t.values + c.offset, c.count);
    if (!t.overwrite) {
      scratch.resize(c.count);
      values = scratch;
      r.ok &= kernels::Decode(codec, m.payload(c.index), values).ok();
    }
    sum_sq += SumOfSquares(values);
  }
  r.norm = std::sqrt(sum_sq);
  r.admitted = norm->Admit(r.norm);
  const double clip = r.admitted.capped ? r.admitted.value / r.norm : 1.0;
  if (!t.overwrite) {
    merge(static_cast<float>(t.scale * clip));
  } else if (r.admitted.capped) {
    for (float& v : std::span<float>(t.values, numel)) v *= static_cast<float>(clip);
  }
  return r;
}

}  // namespace diloco::server
