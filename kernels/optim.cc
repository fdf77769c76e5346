#include "kernels/optim.h"

#include <cmath>

namespace diloco::kernels {

void NesterovStep(const NesterovParams& p, std::span<float> theta, std::span<float> m,
                  std::span<const float> d) {
  const size_t n = theta.size();
  float* __restrict t = theta.data();
  float* __restrict mm = m.data();
  const float* __restrict dd = d.data();
  for (size_t i = 0; i < n; ++i) {
    const float mi = p.mu * mm[i] + dd[i];
    mm[i] = mi;
    t[i] -= p.lr * (dd[i] + p.mu * mi);
  }
}

void AdamWStep(const AdamWParams& p, int64_t step, std::span<float> param,
               std::span<const float> grad, std::span<float> m, std::span<float> v) {
  const float bc1 = 1.0f - std::pow(p.beta1, static_cast<float>(step));
  const float bc2 = 1.0f - std::pow(p.beta2, static_cast<float>(step));
  const size_t n = param.size();
  for (size_t i = 0; i < n; ++i) {
    const float g = grad[i];
    m[i] = p.beta1 * m[i] + (1.0f - p.beta1) * g;
    v[i] = p.beta2 * v[i] + (1.0f - p.beta2) * g * g;
    const float mhat = m[i] / bc1;
    const float vhat = v[i] / bc2;
    param[i] -= p.lr * (mhat / (std::sqrt(vhat) + p.eps) + p.weight_decay * param[i]);
  }
}

void Delta(std::span<const float> anchor, std::span<const float> local, std::span<float> delta) {
  for (size_t i = 0; i < delta.size(); ++i) delta[i] = anchor[i] - local[i];
}

void LerpAdopt(std::span<const float> global, std::span<float> local, float alpha) {
  for (size_t i = 0; i < local.size(); ++i) local[i] = global[i] + alpha * (local[i] - global[i]);
}

}  // namespace diloco::kernels
