// LayerNorm over the channels of each row; F = float runs fast_f32.h's vectorised rows.
#include <cmath>
#include <type_traits>

#include "worker/model/fast_f32.h"
#include "worker/model/layers.h"

namespace diloco::model {

inline constexpr double kLayerNormEps = 1e-5;

template <typename F>
void LayerNormForward(F* out, F* mean, F* rstd, const F* inp, const F* w, const F* b, int N,
                      int C) {
  for (int i = 0; i < N; ++i) {
    const F* x = inp + int64_t(i) * C;
    F* y = out + int64_t(i) * C;
    if constexpr (std::is_same_v<F, float>) {
      f32::LayerNormRow(y, mean + i, rstd + i, x, w, b, C, float(kLayerNormEps));
      continue;
    }
    F m = 0;
    for (int c = 0; c < C; ++c) m += x[c];
    m /= C;
    F v = 0;
    for (int c = 0; c < C; ++c) v += (x[c] - m) * (x[c] - m);
    v /= C;
    const F s = F(1) / std::sqrt(v + F(kLayerNormEps));
    for (int c = 0; c < C; ++c) y[c] = (x[c] - m) * s * w[c] + b[c];
    mean[i] = m;
    rstd[i] = s;
  }
}

template <typename F>
void LayerNormBackward(F* dinp, F* dw, F* db, const F* dout, const F* inp, const F* w,
                       const F* mean, const F* rstd, int N, int C) {
  for (int i = 0; i < N; ++i) {
    const F* dy = dout + int64_t(i) * C;
    const F* x = inp + int64_t(i) * C;
    F* dx = dinp + int64_t(i) * C;
    const F m = mean[i], s = rstd[i];
    if constexpr (std::is_same_v<F, float>) {
      f32::LayerNormRowBackward(dx, dw, db, dy, x, w, m, s, C);
      continue;
    }
    // dnorm = dy * w; dx = s * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat))
    F dnorm_mean = 0, dnorm_xhat_mean = 0;
    for (int c = 0; c < C; ++c) {
      const F xhat = (x[c] - m) * s;
      const F dnorm = dy[c] * w[c];
      dnorm_mean += dnorm;
      dnorm_xhat_mean += dnorm * xhat;
    }
    dnorm_mean /= C;
    dnorm_xhat_mean /= C;
    for (int c = 0; c < C; ++c) {
      const F xhat = (x[c] - m) * s;
      const F dnorm = dy[c] * w[c];
      db[c] += dy[c];
      dw[c] += xhat * dy[c];
      dx[c] += s * (dnorm - dnorm_mean - xhat * dnorm_xhat_mean);
    }
  }
}

#define DILOCO_INSTANTIATE(F)                                                                      \
  template void LayerNormForward<F>(F*, F*, F*, const F*, const F*, const F*, int, int);           \
  template void LayerNormBackward<F>(F*, F*, F*, const F*, const F*, const F*, const F*, const F*, \
                                     int, int);
DILOCO_INSTANTIATE(float)
DILOCO_INSTANTIATE(double)
#undef DILOCO_INSTANTIATE

}  // namespace diloco::model
