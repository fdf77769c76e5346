// Loops of fast_f32.h. Each function is cloned per ISA (target_clones) and written so that GCC
// vectorises it: no libm calls, reductions marked `omp simd` (the file is compiled with
// -fopenmp-simd, which enables the pragma and nothing else of OpenMP).
#include "worker/model/fast_f32.h"

#include <cmath>

#include "worker/model/fast_math.h"

// GCC on x86-64 (the Debian toolchain); elsewhere the loops compile once for the baseline ISA.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DILOCO_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DILOCO_CLONES
#endif

namespace diloco::model::f32 {
namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

inline float Gelu(float x) {
  return 0.5f * x * (1.0f + FastTanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x)));
}

// d gelu(x) / dx
inline float GeluGrad(float x) {
  const float th = FastTanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
  const float sech2 = 1.0f - th * th;
  return 0.5f * (1.0f + th) + 0.5f * x * sech2 * kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
}

}  // namespace

DILOCO_CLONES void GeluForward(float* __restrict out, const float* __restrict inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = Gelu(inp[i]);
}

DILOCO_CLONES void GeluBackward(float* __restrict dinp, const float* __restrict inp,
                                const float* __restrict dout, int64_t n, bool overwrite) {
  if (overwrite) {
    for (int64_t i = 0; i < n; ++i) dinp[i] = GeluGrad(inp[i]) * dout[i];
  } else {
    for (int64_t i = 0; i < n; ++i) dinp[i] += GeluGrad(inp[i]) * dout[i];
  }
}

namespace {

// p = softmax(x) over n values (p may be x); returns the max of x and the sum of exp(x - max).
// Inlined into each ISA clone of its callers, so it is vectorised for each.
struct SoftmaxStats {
  float max, sum;
};
__attribute__((always_inline)) inline SoftmaxStats Softmax(float* p, const float* x, int n) {
  float mx = x[0];
#pragma omp simd reduction(max : mx)
  for (int j = 0; j < n; ++j) mx = x[j] > mx ? x[j] : mx;
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int j = 0; j < n; ++j) {
    const float e = FastExp(x[j] - mx);
    p[j] = e;
    sum += e;
  }
  const float inv = 1.0f / sum;
  for (int j = 0; j < n; ++j) p[j] *= inv;
  return {mx, sum};
}

}  // namespace

DILOCO_CLONES void SoftmaxRow(float* row, int n) { Softmax(row, row, n); }

DILOCO_CLONES float SoftmaxCrossEntropyRow(float* __restrict p, const float* __restrict l,
                                           int target, int V) {
  const SoftmaxStats s = Softmax(p, l, V);
  return std::log(s.sum) - (l[target] - s.max);
}

DILOCO_CLONES void LayerNormRow(float* __restrict y, float* m, float* s, const float* __restrict x,
                                const float* __restrict w, const float* __restrict b, int C,
                                float eps) {
  float sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int c = 0; c < C; ++c) sum += x[c];
  const float mean = sum / C;
  float var = 0;
#pragma omp simd reduction(+ : var)
  for (int c = 0; c < C; ++c) var += (x[c] - mean) * (x[c] - mean);
  const float rstd = 1.0f / std::sqrt(var / C + eps);
  for (int c = 0; c < C; ++c) y[c] = (x[c] - mean) * rstd * w[c] + b[c];
  *m = mean;
  *s = rstd;
}

DILOCO_CLONES void LayerNormRowBackward(float* __restrict dx, float* __restrict dw,
                                        float* __restrict db, const float* __restrict dy,
                                        const float* __restrict x, const float* __restrict w,
                                        float m, float s, int C) {
  // dnorm = dy * w; dx = s * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat))
  float dnorm_mean = 0, dnorm_xhat_mean = 0;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_xhat_mean)
  for (int c = 0; c < C; ++c) {
    const float dnorm = dy[c] * w[c];
    dnorm_mean += dnorm;
    dnorm_xhat_mean += dnorm * ((x[c] - m) * s);
  }
  dnorm_mean /= C;
  dnorm_xhat_mean /= C;
  for (int c = 0; c < C; ++c) {
    const float xhat = (x[c] - m) * s;
    db[c] += dy[c];
    dw[c] += xhat * dy[c];
    dx[c] += s * (dy[c] * w[c] - dnorm_mean - xhat * dnorm_xhat_mean);
  }
}

}  // namespace diloco::model::f32
