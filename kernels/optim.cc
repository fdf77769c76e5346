// The fast CPU optimizer steps: the loops of fast_impl.inc (best instruction set) spread over the
// kernel thread pool. Same float operations as kernels/reference.cc, so identical results.
#include "kernels/optim.h"

#include <cmath>

#include "kernels/fast_ops.h"
#include "kernels/thread_pool.h"

namespace diloco::kernels {
namespace {

constexpr size_t kMinElementsPerTask = 1 << 16;

}  // namespace

void NesterovStep(const NesterovParams& p, std::span<float> theta, std::span<float> m,
                  std::span<const float> d) {
  ParallelFor(theta.size(), kMinElementsPerTask, [&](size_t lo, size_t hi) {
    internal::Ops().nesterov(p, theta.data() + lo, m.data() + lo, d.data() + lo, hi - lo);
  });
}

void AdamWStep(const AdamWParams& p, int64_t step, std::span<float> param,
               std::span<const float> grad, std::span<float> m, std::span<float> v) {
  const float bc1 = 1.0f - std::pow(p.beta1, static_cast<float>(step));
  const float bc2 = 1.0f - std::pow(p.beta2, static_cast<float>(step));
  ParallelFor(param.size(), kMinElementsPerTask, [&](size_t lo, size_t hi) {
    internal::Ops().adamw(p, bc1, bc2, param.data() + lo, grad.data() + lo, m.data() + lo,
                          v.data() + lo, hi - lo);
  });
}

void Delta(std::span<const float> anchor, std::span<const float> local, std::span<float> delta) {
  ParallelFor(delta.size(), kMinElementsPerTask, [&](size_t lo, size_t hi) {
    internal::Ops().delta(anchor.data() + lo, local.data() + lo, delta.data() + lo, hi - lo);
  });
}

void LerpAdopt(std::span<const float> global, std::span<float> local, float alpha) {
  ParallelFor(local.size(), kMinElementsPerTask, [&](size_t lo, size_t hi) {
    internal::Ops().lerp(global.data() + lo, local.data() + lo, alpha, hi - lo);
  });
}

void RebaseAdopt(std::span<const float> global, std::span<float> anchor, std::span<float> local,
                 std::span<const float> pushed, float pushed_scale) {
  const float* g = global.data();
  const float* d = pushed.empty() ? nullptr : pushed.data();
  float* a = anchor.data();
  float* l = local.data();
  ParallelFor(local.size(), kMinElementsPerTask, [&](size_t lo, size_t hi) {
    // pushed_scale 1 multiplies exactly (and this file is built without contraction to FMA):
    // the same values as a sum without it.
    if (d) {
      for (size_t i = lo; i < hi; ++i) l[i] = g[i] + ((l[i] - a[i]) + pushed_scale * d[i]);
    } else {
      for (size_t i = lo; i < hi; ++i) l[i] = g[i] + (l[i] - a[i]);
    }
    for (size_t i = lo; i < hi; ++i) a[i] = g[i];
  });
}

void Axpy(float a, std::span<const float> x, std::span<float> y) {
  const float* xs = x.data();
  float* ys = y.data();
  ParallelFor(y.size(), kMinElementsPerTask, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) ys[i] += a * xs[i];
  });
}

}  // namespace diloco::kernels
