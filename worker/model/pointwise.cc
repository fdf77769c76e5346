// Embeddings, GELU, residual additions and the softmax cross-entropy: the layers that are not
// matrix products. F = float runs the vectorised loops of fast_f32.h where libm would be called.
#include <cmath>
#include <type_traits>

#include "worker/model/fast_f32.h"
#include "worker/model/layers.h"

namespace diloco::model {

template <typename F>
void EncoderForward(F* out, const int32_t* inp, const F* wte, const F* wpe, int B, int T, int C) {
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      F* o = out + (int64_t(b) * T + t) * C;
      const F* e = wte + int64_t(inp[b * T + t]) * C;
      const F* p = wpe + int64_t(t) * C;
      for (int c = 0; c < C; ++c) o[c] = e[c] + p[c];
    }
  }
}

template <typename F>
void EncoderBackward(F* dwte, F* dwpe, const F* dout, const int32_t* inp, int B, int T, int C) {
  for (int b = 0; b < B; ++b) {
    for (int t = 0; t < T; ++t) {
      const F* d = dout + (int64_t(b) * T + t) * C;
      F* de = dwte + int64_t(inp[b * T + t]) * C;
      F* dp = dwpe + int64_t(t) * C;
      for (int c = 0; c < C; ++c) {
        de[c] += d[c];
        dp[c] += d[c];
      }
    }
  }
}

// gelu(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
template <typename F>
void GeluForward(F* out, const F* inp, int64_t n) {
  if constexpr (std::is_same_v<F, float>) return f32::GeluForward(out, inp, n);
  const F k = F(0.7978845608028654);  // sqrt(2/pi)
  for (int64_t i = 0; i < n; ++i) {
    const F x = inp[i];
    out[i] = F(0.5) * x * (F(1) + std::tanh(k * (x + F(0.044715) * x * x * x)));
  }
}

template <typename F>
void GeluBackward(F* dinp, const F* inp, const F* dout, int64_t n, bool dinp_overwrite) {
  if constexpr (std::is_same_v<F, float>)
    return f32::GeluBackward(dinp, inp, dout, n, dinp_overwrite);
  const F k = F(0.7978845608028654);
  for (int64_t i = 0; i < n; ++i) {
    const F x = inp[i];
    const F u = k * (x + F(0.044715) * x * x * x);
    const F th = std::tanh(u);
    const F sech2 = F(1) - th * th;
    const F grad = F(0.5) * (F(1) + th) + F(0.5) * x * sech2 * k * (F(1) + F(3 * 0.044715) * x * x);
    dinp[i] = (dinp_overwrite ? F(0) : dinp[i]) + grad * dout[i];
  }
}

template <typename F>
void ResidualForward(F* out, const F* a, const F* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <typename F>
void ResidualBackward(F* da, F* db, const F* dout, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    da[i] += dout[i];
    db[i] += dout[i];
  }
}

template <typename F>
double CrossEntropyForward(F* probs, F* losses, const F* logits, const int32_t* targets, int N,
                           int V) {
  double total = 0;
  for (int i = 0; i < N; ++i) {
    const F* l = logits + int64_t(i) * V;
    F* p = probs + int64_t(i) * V;
    if constexpr (std::is_same_v<F, float>) {
      losses[i] = f32::SoftmaxCrossEntropyRow(p, l, targets[i], V);
      total += losses[i];
      continue;
    }
    F mx = l[0];
    for (int j = 1; j < V; ++j) mx = l[j] > mx ? l[j] : mx;
    F sum = 0;
    for (int j = 0; j < V; ++j) sum += (p[j] = std::exp(l[j] - mx));
    const F inv = F(1) / sum;
    for (int j = 0; j < V; ++j) p[j] *= inv;
    // -log p[target] computed from the logits keeps precision for tiny probabilities.
    losses[i] = std::log(sum) - (l[targets[i]] - mx);
    total += losses[i];
  }
  return total / N;
}

template <typename F>
void CrossEntropyBackward(F* dlogits, const F* probs, const int32_t* targets, int N, int V,
                          F scale) {
  for (int i = 0; i < N; ++i) {
    const F* p = probs + int64_t(i) * V;
    F* d = dlogits + int64_t(i) * V;
    for (int j = 0; j < V; ++j) d[j] += p[j] * scale;
    d[targets[i]] -= scale;
  }
}

#define DILOCO_INSTANTIATE(F)                                                             \
  template void EncoderForward<F>(F*, const int32_t*, const F*, const F*, int, int, int); \
  template void EncoderBackward<F>(F*, F*, const F*, const int32_t*, int, int, int);      \
  template void GeluForward<F>(F*, const F*, int64_t);                                    \
  template void GeluBackward<F>(F*, const F*, const F*, int64_t, bool);                   \
  template void ResidualForward<F>(F*, const F*, const F*, int64_t);                      \
  template void ResidualBackward<F>(F*, F*, const F*, int64_t);                           \
  template double CrossEntropyForward<F>(F*, F*, const F*, const int32_t*, int, int);     \
  template void CrossEntropyBackward<F>(F*, const F*, const int32_t*, int, int, F);
DILOCO_INSTANTIATE(float)
DILOCO_INSTANTIATE(double)
#undef DILOCO_INSTANTIATE

}  // namespace diloco::model
