#include "kernels/outer.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/optim.h"
#include "kernels/thread_pool.h"

namespace diloco::kernels {
namespace {

constexpr size_t kMinElementsPerTask = 1 << 16;

double SquaredNorm(std::span<const float> x) {
  double s = 0.0;
  for (float v : x) s += static_cast<double>(v) * v;
  return s;
}

}  // namespace

absl::Status RdaMerge(std::span<const std::span<const float>> deltas,
                      std::span<const float> weights, std::span<float> out) {
  if (deltas.size() != weights.size() || deltas.empty()) {
    return absl::InvalidArgumentError("RdaMerge needs one weight per delta and at least one delta");
  }
  double w_sum = 0.0;
  for (size_t k = 0; k < deltas.size(); ++k) {
    if (deltas[k].size() != out.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "RdaMerge: delta ", k, " has ", deltas[k].size(), " values, want ", out.size()));
    }
    if (!(weights[k] >= 0.0f) || !std::isfinite(weights[k])) {
      return absl::InvalidArgumentError("RdaMerge: weights must be finite and >= 0");
    }
    w_sum += weights[k];
  }
  if (!(w_sum > 0.0)) return absl::InvalidArgumentError("RdaMerge: weights sum to 0");
  double mean_norm = 0.0;
  std::vector<float> coef(deltas.size(), 0.0f);  // w_k / (n_k W): ubar = sum coef_k d_k
  for (size_t k = 0; k < deltas.size(); ++k) {
    const double norm = std::sqrt(SquaredNorm(deltas[k]));
    mean_norm += weights[k] * norm / w_sum;
    if (norm > 0.0) coef[k] = static_cast<float>(weights[k] / (norm * w_sum));
  }
  ParallelFor(out.size(), kMinElementsPerTask, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) {
      float u = 0.0f;
      for (size_t k = 0; k < deltas.size(); ++k) u += coef[k] * deltas[k][i];
      out[i] = u;
    }
  });
  const double ubar_norm = std::sqrt(SquaredNorm(out));
  const float rescale = ubar_norm > 0.0 ? static_cast<float>(mean_norm / ubar_norm) : 0.0f;
  ParallelFor(out.size(), kMinElementsPerTask, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) out[i] *= rescale;
  });
  return absl::OkStatus();
}

float StalenessDiscount(int64_t staleness, float alpha) {
  if (alpha == 0.0f || staleness <= 0) return 1.0f;
  return static_cast<float>(std::pow(1.0 + static_cast<double>(staleness), -alpha));
}

absl::Status SgdStep(float lr, std::span<float> theta, std::span<const float> d) {
  if (theta.size() != d.size())
    return absl::InvalidArgumentError(
        absl::StrCat("SGD step on spans of ", theta.size(), ", ", d.size()));
  ParallelFor(theta.size(), kMinElementsPerTask, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) theta[i] = theta[i] - lr * d[i];
  });
  return absl::OkStatus();
}

absl::Status PartialNesterovStep(const NesterovParams& p, double share, std::span<float> theta,
                                 std::span<float> m, std::span<const float> d) {
  if (theta.size() != m.size() || theta.size() != d.size())
    return absl::InvalidArgumentError(absl::StrCat("partial Nesterov step on spans of ",
                                                   theta.size(), ", ", m.size(), ", ", d.size()));
  if (!(share > 0 && share <= 1))
    return absl::InvalidArgumentError(absl::StrCat("round share ", share, " not in (0, 1]"));
  if (share == 1) {
    NesterovStep(p, theta, m, d);
    return absl::OkStatus();
  }
  const float decay = static_cast<float>(1 - share * (1 - static_cast<double>(p.mu)));
  const float look = static_cast<float>(share * p.mu);
  ParallelFor(theta.size(), kMinElementsPerTask, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) {
      m[i] = decay * m[i] + d[i];
      theta[i] = theta[i] - p.lr * (d[i] + look * m[i]);
    }
  });
  return absl::OkStatus();
}

namespace {

// Phases this close to 1 end the full round (a sum of shares that should be 1 rarely is, in
// floating point).
constexpr double kPhaseEnd = 1 - 1e-9;

// One sub-step S0 -> S1 <= 1 of delta `frac` * d.
void ComposedSubStep(const NesterovParams& p, double s0, double s1, float frac,
                     std::span<float> theta, std::span<float> m, std::span<const float> d) {
  const float decay = s0 == 0 ? p.mu : 1.0f;
  const float a0 = p.mu * static_cast<float>(s0), a1 = p.mu * static_cast<float>(s1);
  ParallelFor(theta.size(), kMinElementsPerTask, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) {
      const float di = frac * d[i];
      const float p0 = decay * m[i];
      const float p1 = p0 + di;
      theta[i] = theta[i] - p.lr * (di + (a1 * p1 - a0 * p0));
      m[i] = p1;
    }
  });
}

}  // namespace

absl::Status ComposedNesterovStep(const NesterovParams& p, double share, double* phase,
                                  std::span<float> theta, std::span<float> m,
                                  std::span<const float> d) {
  if (theta.size() != m.size() || theta.size() != d.size())
    return absl::InvalidArgumentError(absl::StrCat("composed Nesterov step on spans of ",
                                                   theta.size(), ", ", m.size(), ", ", d.size()));
  if (!(share > 0 && share <= 1))
    return absl::InvalidArgumentError(absl::StrCat("round share ", share, " not in (0, 1]"));
  if (!(*phase >= 0 && *phase < 1))
    return absl::InvalidArgumentError(absl::StrCat("round phase ", *phase, " not in [0, 1)"));
  const double s0 = *phase, s1 = s0 + share;
  if (s1 < kPhaseEnd) {
    ComposedSubStep(p, s0, s1, 1.0f, theta, m, d);
    *phase = s1;
    return absl::OkStatus();
  }
  // The full round ends inside this one: step to 1 on its part of d, the rest from phase 0.
  const double head = 1 - s0, rest = s1 - 1;
  ComposedSubStep(p, s0, 1, static_cast<float>(head / share), theta, m, d);
  *phase = 0;
  if (rest > 1 - kPhaseEnd) {
    ComposedSubStep(p, 0, rest, static_cast<float>(rest / share), theta, m, d);
    *phase = rest;
  }
  return absl::OkStatus();
}

DelayedNesterov::DelayedNesterov(NesterovParams p, int period, size_t size)
    : p_(p), period_(period < 1 ? 1 : period), sum_(size, 0.0f) {}

absl::Status DelayedNesterov::Arrive(std::span<float> theta, std::span<float> m,
                                     std::span<const float> g) {
  const size_t n = sum_.size();
  if (theta.size() != n || m.size() != n || g.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat("DelayedNesterov of ", n,
                                                   " values got spans of ", theta.size(), ", ",
                                                   m.size(), ", ", g.size()));
  }
  const float step = p_.lr / static_cast<float>(period_);
  const bool close = pending_ + 1 == period_;
  const float inv_n = 1.0f / static_cast<float>(period_);
  float* s = sum_.data();
  ParallelFor(n, kMinElementsPerTask, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) {
      theta[i] = theta[i] - step * g[i];
      s[i] = s[i] + g[i];
      if (close) {
        const float gbar = s[i] * inv_n;
        m[i] = p_.mu * m[i] + gbar;
        theta[i] = theta[i] - p_.lr * p_.mu * m[i];
        s[i] = 0.0f;
      }
    }
  });
  pending_ = close ? 0 : pending_ + 1;
  return absl::OkStatus();
}

}  // namespace diloco::kernels
