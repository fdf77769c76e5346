#include "worker/model/llama/llama_model.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "worker/model/layers.h"

namespace diloco::model {
namespace {

// out = inp * rstd * w over rows of C; saves rstd (N).
template <typename F>
void RmsNormForward(F* out, F* rstd, const F* inp, const F* w, int N, int C, double eps) {
  for (int n = 0; n < N; ++n) {
    const F* x = inp + int64_t(n) * C;
    F* y = out + int64_t(n) * C;
    double ss = 0;
    for (int i = 0; i < C; ++i) ss += double(x[i]) * x[i];
    const F r = F(1.0 / std::sqrt(ss / C + eps));
    rstd[n] = r;
    for (int i = 0; i < C; ++i) y[i] = x[i] * r * w[i];
  }
}

// dinp += d(out)/d(inp)^T dout; dw += sum_n dout * inp * rstd.
template <typename F>
void RmsNormBackward(F* dinp, F* dw, const F* dout, const F* inp, const F* w, const F* rstd, int N,
                     int C) {
  for (int n = 0; n < N; ++n) {
    const F* x = inp + int64_t(n) * C;
    const F* dy = dout + int64_t(n) * C;
    F* dx = dinp + int64_t(n) * C;
    const F r = rstd[n];
    F dot = 0;
    for (int i = 0; i < C; ++i) {
      dot += dy[i] * w[i] * x[i];
      dw[i] += dy[i] * x[i] * r;
    }
    const F k = dot * r * r * r / F(C);
    for (int i = 0; i < C; ++i) dx[i] += dy[i] * w[i] * r - x[i] * k;
  }
}

// Rotates each head of `v` (rows of `stride`, heads of D from column 0) at position t = row % T;
// inverse = true applies the transpose (the backward pass).
template <typename F>
void Rope(F* v, int N, int T, int heads, int D, int stride, const std::vector<double>& cos,
          const std::vector<double>& sin, bool inverse) {
  const int half = D / 2;
  for (int n = 0; n < N; ++n) {
    const int t = n % T;
    for (int h = 0; h < heads; ++h) {
      F* p = v + int64_t(n) * stride + h * D;
      for (int i = 0; i < half; ++i) {
        const F c = F(cos[size_t(t) * half + i]);
        const F s = inverse ? F(-sin[size_t(t) * half + i]) : F(sin[size_t(t) * half + i]);
        const F a = p[i], b = p[i + half];
        p[i] = a * c - b * s;
        p[i + half] = b * c + a * s;
      }
    }
  }
}

uint64_t SplitMix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

template <typename F>
absl::StatusOr<std::unique_ptr<LlamaModel<F>>> LlamaModel<F>::Create(const LlamaConfig& c,
                                                                     int batch, int seq_len) {
  if (batch < 1 || seq_len < 1 || seq_len > c.context)
    return absl::InvalidArgumentError(absl::StrCat("llama: batch ", batch, " and seq_len ", seq_len,
                                                   " (context ", c.context, ")"));
  absl::StatusOr<Manifest> m = LlamaManifest(c);
  if (!m.ok()) return m.status();
  std::unique_ptr<LlamaModel> p(new LlamaModel);
  p->c_ = c;
  p->manifest_ = *std::move(m);
  p->B_ = batch;
  p->T_ = seq_len;
  const auto at = [&](const std::string& name) { return p->manifest_.Find(name)->offset; };
  p->embed_ = at("model.embed_tokens.weight");
  p->norm_ = at("model.norm.weight");
  p->head_ = at("lm_head.weight");
  for (int l = 0; l < c.layers; ++l) {
    const std::string h = absl::StrCat("model.layers.", l, ".");
    p->off_.push_back({at(h + "self_attn.q_proj.weight"), at(h + "self_attn.k_proj.weight"),
                       at(h + "self_attn.v_proj.weight"), at(h + "self_attn.o_proj.weight"),
                       at(h + "mlp.gate_proj.weight"), at(h + "mlp.up_proj.weight"),
                       at(h + "mlp.down_proj.weight"), at(h + "input_layernorm.weight"),
                       at(h + "post_attention_layernorm.weight")});
  }
  p->params_.assign(p->manifest_.total_elements(), F(0));
  p->grads_.assign(p->params_.size(), F(0));
  const int D = c.head_size(), half = D / 2;
  p->cos_.resize(size_t(seq_len) * half);
  p->sin_.resize(p->cos_.size());
  for (int t = 0; t < seq_len; ++t)
    for (int i = 0; i < half; ++i) {
      const double inv_freq = 1.0 / std::pow(c.rope_theta, double(2 * i) / D);
      p->cos_[size_t(t) * half + i] = std::cos(t * inv_freq);
      p->sin_[size_t(t) * half + i] = std::sin(t * inv_freq);
    }
  const size_t N = size_t(batch) * seq_len, C = c.width, Fw = c.ffn, V = c.vocab;
  p->x0_.resize(N * C);
  p->layers_.resize(c.layers);
  for (Layer& L : p->layers_) {
    L.rstd1.resize(N);
    L.h1.resize(N * C);
    L.qkv.resize(N * 3 * C);
    L.att.resize(size_t(batch) * c.heads * seq_len * seq_len);
    L.atty.resize(N * C);
    L.x2.resize(N * C);
    L.rstd2.resize(N);
    L.h2.resize(N * C);
    L.g.resize(N * Fw);
    L.u.resize(N * Fw);
    L.a.resize(N * Fw);
    L.out.resize(N * C);
  }
  p->rstdf_.resize(N);
  p->hf_.resize(N * C);
  p->logits_.resize(N * V);
  p->probs_.resize(N * V);
  p->losses_.resize(N);
  const size_t KVD = size_t(c.kv_heads) * D;
  p->k_.resize(N * KVD);
  p->v_.resize(N * KVD);
  p->dres_.resize(N * C);
  p->dh_.resize(N * C);
  p->dlogits_.resize(N * V);
  p->dqkv_.resize(N * 3 * C);
  p->dq_.resize(N * C);
  p->dk_.resize(N * KVD);
  p->dv_.resize(N * KVD);
  p->datty_.resize(N * C);
  p->dg_.resize(N * Fw);
  p->du_.resize(N * Fw);
  p->da_.resize(N * Fw);
  p->scratch_.resize(size_t(seq_len) * seq_len);
  p->inputs_.resize(N);
  p->targets_.resize(N);
  return p;
}

template <typename F>
double LlamaModel<F>::Forward(const int32_t* inputs, const int32_t* targets) {
  const int N = B_ * T_, C = c_.width, D = c_.head_size(), H = c_.heads, KV = c_.kv_heads;
  const int KVD = KV * D, group = H / KV, Fw = c_.ffn, V = c_.vocab;
  std::copy(inputs, inputs + N, inputs_.begin());
  std::copy(targets, targets + N, targets_.begin());
  const F* W = params_.data();
  for (int n = 0; n < N; ++n)
    std::copy_n(W + embed_ + int64_t(inputs[n]) * C, C, x0_.data() + int64_t(n) * C);
  F *k = k_.data(), *v = v_.data();
  const F* x = x0_.data();
  for (int l = 0; l < c_.layers; ++l) {
    Layer& L = layers_[l];
    const Offsets& o = off_[l];
    RmsNormForward(L.h1.data(), L.rstd1.data(), x, W + o.w_in, N, C, c_.rms_eps);
    F* qkv = L.qkv.data();
    // q straight into the first C columns of (N, 3C); k, v expanded to every query head.
    Gemm<F>(false, true, N, C, C, F(1), L.h1.data(), C, W + o.wq, C, F(0), qkv, 3 * C);
    LinearForward(k, L.h1.data(), W + o.wk, static_cast<const F*>(nullptr), N, C, KVD);
    LinearForward(v, L.h1.data(), W + o.wv, static_cast<const F*>(nullptr), N, C, KVD);
    Rope(qkv, N, T_, H, D, 3 * C, cos_, sin_, false);
    Rope(k, N, T_, KV, D, KVD, cos_, sin_, false);
    for (int n = 0; n < N; ++n)
      for (int h = 0; h < H; ++h) {
        const int64_t src = int64_t(n) * KVD + (h / group) * D;
        std::copy_n(k + src, D, qkv + int64_t(n) * 3 * C + C + h * D);
        std::copy_n(v + src, D, qkv + int64_t(n) * 3 * C + 2 * C + h * D);
      }
    AttentionForward(L.atty.data(), L.att.data(), qkv, B_, T_, C, H);
    LinearForward(L.x2.data(), L.atty.data(), W + o.wo, static_cast<const F*>(nullptr), N, C, C);
    for (int64_t i = 0; i < int64_t(N) * C; ++i) L.x2[i] += x[i];
    RmsNormForward(L.h2.data(), L.rstd2.data(), L.x2.data(), W + o.w_post, N, C, c_.rms_eps);
    LinearForward(L.g.data(), L.h2.data(), W + o.wg, static_cast<const F*>(nullptr), N, C, Fw);
    LinearForward(L.u.data(), L.h2.data(), W + o.wu, static_cast<const F*>(nullptr), N, C, Fw);
    for (int64_t i = 0; i < int64_t(N) * Fw; ++i) {
      const F g = L.g[i];
      L.a[i] = g / (F(1) + std::exp(-g)) * L.u[i];
    }
    LinearForward(L.out.data(), L.a.data(), W + o.wd, static_cast<const F*>(nullptr), N, Fw, C);
    for (int64_t i = 0; i < int64_t(N) * C; ++i) L.out[i] += L.x2[i];
    x = L.out.data();
  }
  RmsNormForward(hf_.data(), rstdf_.data(), x, W + norm_, N, C, c_.rms_eps);
  LinearForward(logits_.data(), hf_.data(), W + head_, static_cast<const F*>(nullptr), N, C, V);
  return CrossEntropyForward(probs_.data(), losses_.data(), logits_.data(), targets, N, V);
}

template <typename F>
void LlamaModel<F>::Backward() {
  const int N = B_ * T_, C = c_.width, D = c_.head_size(), H = c_.heads, KV = c_.kv_heads;
  const int KVD = KV * D, group = H / KV, Fw = c_.ffn, V = c_.vocab;
  std::fill(grads_.begin(), grads_.end(), F(0));
  const F* W = params_.data();
  F* G = grads_.data();
  std::fill(dlogits_.begin(), dlogits_.end(), F(0));
  CrossEntropyBackward(dlogits_.data(), probs_.data(), targets_.data(), N, V, F(1) / F(N));
  LinearBackward(dh_.data(), G + head_, static_cast<F*>(nullptr), dlogits_.data(), hf_.data(),
                 W + head_, N, C, V, true);
  const F* x_last = c_.layers > 0 ? layers_.back().out.data() : x0_.data();
  std::fill(dres_.begin(), dres_.end(), F(0));
  RmsNormBackward(dres_.data(), G + norm_, dh_.data(), x_last, W + norm_, rstdf_.data(), N, C);
  for (int l = c_.layers - 1; l >= 0; --l) {
    Layer& L = layers_[l];
    const Offsets& o = off_[l];
    const F* x = l > 0 ? layers_[l - 1].out.data() : x0_.data();
    // out = x2 + a Wd^T: dres passes to x2 unchanged.
    LinearBackward(da_.data(), G + o.wd, static_cast<F*>(nullptr), dres_.data(), L.a.data(),
                   W + o.wd, N, Fw, C, true);
    for (int64_t i = 0; i < int64_t(N) * Fw; ++i) {
      const F g = L.g[i], sig = F(1) / (F(1) + std::exp(-g));
      du_[i] = da_[i] * g * sig;
      dg_[i] = da_[i] * L.u[i] * sig * (F(1) + g * (F(1) - sig));
    }
    LinearBackward(dh_.data(), G + o.wg, static_cast<F*>(nullptr), dg_.data(), L.h2.data(),
                   W + o.wg, N, C, Fw, true);
    LinearBackward(dh_.data(), G + o.wu, static_cast<F*>(nullptr), du_.data(), L.h2.data(),
                   W + o.wu, N, C, Fw, false);
    RmsNormBackward(dres_.data(), G + o.w_post, dh_.data(), L.x2.data(), W + o.w_post,
                    L.rstd2.data(), N, C);
    // x2 = x + atty Wo^T.
    LinearBackward(datty_.data(), G + o.wo, static_cast<F*>(nullptr), dres_.data(), L.atty.data(),
                   W + o.wo, N, C, C, true);
    std::fill(dqkv_.begin(), dqkv_.end(), F(0));
    AttentionBackward(dqkv_.data(), scratch_.data(), datty_.data(), L.qkv.data(), L.att.data(), B_,
                      T_, C, H);
    std::fill(dk_.begin(), dk_.end(), F(0));
    std::fill(dv_.begin(), dv_.end(), F(0));
    for (int n = 0; n < N; ++n) {
      const F* row = dqkv_.data() + int64_t(n) * 3 * C;
      std::copy_n(row, C, dq_.data() + int64_t(n) * C);
      for (int h = 0; h < H; ++h) {
        F* dk = dk_.data() + int64_t(n) * KVD + (h / group) * D;
        F* dv = dv_.data() + int64_t(n) * KVD + (h / group) * D;
        for (int i = 0; i < D; ++i) {
          dk[i] += row[C + h * D + i];
          dv[i] += row[2 * C + h * D + i];
        }
      }
    }
    Rope(dq_.data(), N, T_, H, D, C, cos_, sin_, true);
    Rope(dk_.data(), N, T_, KV, D, KVD, cos_, sin_, true);
    LinearBackward(dh_.data(), G + o.wq, static_cast<F*>(nullptr), dq_.data(), L.h1.data(),
                   W + o.wq, N, C, C, true);
    LinearBackward(dh_.data(), G + o.wk, static_cast<F*>(nullptr), dk_.data(), L.h1.data(),
                   W + o.wk, N, C, KVD, false);
    LinearBackward(dh_.data(), G + o.wv, static_cast<F*>(nullptr), dv_.data(), L.h1.data(),
                   W + o.wv, N, C, KVD, false);
    RmsNormBackward(dres_.data(), G + o.w_in, dh_.data(), x, W + o.w_in, L.rstd1.data(), N, C);
  }
  for (int n = 0; n < N; ++n) {
    F* row = G + embed_ + int64_t(inputs_[n]) * C;
    const F* d = dres_.data() + int64_t(n) * C;
    for (int i = 0; i < C; ++i) row[i] += d[i];
  }
}

template class LlamaModel<float>;
template class LlamaModel<double>;

void InitLlama(const Manifest& manifest, uint64_t seed, std::span<float> params) {
  uint64_t s = seed ^ 0x11A3A5EEDull;
  const double kTwoPi = 6.283185307179586;
  for (const TensorSpec& t : manifest.tensors()) {
    float* p = params.data() + t.offset;
    const uint64_t n = t.numel();
    if (t.shape.size() == 1) {
      std::fill(p, p + n, 1.0f);
      continue;
    }
    for (uint64_t i = 0; i < n; i += 2) {
      const double u1 = (double(SplitMix(s) >> 11) + 1.0) * 0x1.0p-53;
      const double u2 = double(SplitMix(s) >> 11) * 0x1.0p-53;
      const double r = std::sqrt(-2.0 * std::log(u1));
      p[i] = static_cast<float>(0.02 * r * std::cos(kTwoPi * u2));
      if (i + 1 < n) p[i + 1] = static_cast<float>(0.02 * r * std::sin(kTwoPi * u2));
    }
  }
}

}  // namespace diloco::model
