#include "worker/model/gpt.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "worker/model/cpu_threads.h"
#include "worker/model/layers.h"

namespace diloco::model {

template <typename F>
absl::StatusOr<std::unique_ptr<Gpt<F>>> Gpt<F>::Create(const GptConfig& config, int batch,
                                                       int seq_len, bool training) {
  absl::StatusOr<ParamLayout> layout = MakeParamLayout(config);
  if (!layout.ok()) return layout.status();
  if (batch < 1 || seq_len < 1 || seq_len > config.context)
    return absl::InvalidArgumentError(absl::StrCat("batch ", batch, ", seq_len ", seq_len,
                                                   ": need batch >= 1, 1 <= seq_len <= context ",
                                                   config.context));
  std::unique_ptr<Gpt> g(new Gpt());
  g->layout_ = *std::move(layout);
  g->B_ = batch;
  g->T_ = seq_len;
  g->params_.assign(g->layout_.total, F(0));
  g->Allocate(g->acts_);
  if (training) {
    g->grads_.assign(g->layout_.total, F(0));
    g->AllocateGrads();
    g->scratch_parts_ = CpuThreads();  // the attention backward's threads, a T*T slice each
    g->scratch_.assign(size_t(g->scratch_parts_) * seq_len * seq_len, F(0));
  }
  g->inputs_.assign(size_t(batch) * seq_len, 0);
  g->targets_.assign(size_t(batch) * seq_len, 0);
  return g;
}

template <typename F>
size_t Gpt<F>::ForwardActivationBytes(const GptConfig& c, int batch, int seq_len) {
  // As Allocate(acts): per layer 18 (N, C) tensors, 4 statistics per position and the
  // (B, H, T, T) attention; then the embedding, ln_f with its statistics, logits, probabilities
  // and losses.
  const size_t N = size_t(batch) * seq_len, C = c.width, V = c.vocab;
  const size_t per_layer = 18 * N * C + 4 * N + size_t(batch) * c.heads * seq_len * seq_len;
  return sizeof(F) * (c.layers * per_layer + 2 * N * C + 3 * N + 2 * N * V);
}

template <typename F>
void Gpt<F>::Allocate(Acts& a) {
  const GptConfig& c = layout_.config;
  const size_t N = size_t(B_) * T_, C = c.width, V = c.vocab;
  a.encoded.assign(N * C, F(0));
  a.layers.resize(c.layers);
  for (Layer& l : a.layers) {
    l.ln1.assign(N * C, F(0));
    l.ln1_mean.assign(N, F(0));
    l.ln1_rstd.assign(N, F(0));
    l.qkv.assign(N * 3 * C, F(0));
    l.atty.assign(N * C, F(0));
    l.att.assign(size_t(B_) * c.heads * T_ * T_, F(0));
    l.attproj.assign(N * C, F(0));
    l.res2.assign(N * C, F(0));
    l.ln2.assign(N * C, F(0));
    l.ln2_mean.assign(N, F(0));
    l.ln2_rstd.assign(N, F(0));
    l.fch.assign(N * 4 * C, F(0));
    l.fch_gelu.assign(N * 4 * C, F(0));
    l.fcproj.assign(N * C, F(0));
    l.res3.assign(N * C, F(0));
  }
  a.lnf.assign(N * C, F(0));
  a.lnf_mean.assign(N, F(0));
  a.lnf_rstd.assign(N, F(0));
  a.logits.assign(N * V, F(0));
  a.probs.assign(N * V, F(0));
  a.losses.assign(N, F(0));
}

template <typename F>
void Gpt<F>::AllocateGrads() {
  const GptConfig& c = layout_.config;
  const size_t N = size_t(B_) * T_, C = c.width, V = c.vocab;
  d_.dlogits.assign(N * V, F(0));
  for (std::vector<F>* v : {&d_.dlnf, &d_.dresid, &d_.dln2, &d_.datty, &d_.dln1})
    v->assign(N * C, F(0));
  d_.dfch_gelu.assign(N * 4 * C, F(0));
  d_.dfch.assign(N * 4 * C, F(0));
  d_.dqkv.assign(N * 3 * C, F(0));
}

template <typename F>
double Gpt<F>::Forward(const int32_t* inputs, const int32_t* targets) {
  const GptConfig& c = layout_.config;
  const int B = B_, T = T_, C = c.width, V = c.vocab, NH = c.heads, N = B * T;
  std::copy(inputs, inputs + N, inputs_.begin());
  std::copy(targets, targets + N, targets_.begin());
  const F* p = params_.data();
  EncoderForward(acts_.encoded.data(), inputs, p + layout_.wte, p + layout_.wpe, B, T, C);
  const F* x = acts_.encoded.data();
  for (int i = 0; i < c.layers; ++i) {
    const LayerOffsets& o = layout_.layers[i];
    Layer& a = acts_.layers[i];
    LayerNormForward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), x, p + o.ln1w, p + o.ln1b,
                     N, C);
    LinearForward(a.qkv.data(), a.ln1.data(), p + o.qkvw, p + o.qkvb, N, C, 3 * C);
    AttentionForward(a.atty.data(), a.att.data(), a.qkv.data(), B, T, C, NH);
    LinearForward(a.attproj.data(), a.atty.data(), p + o.attprojw, p + o.attprojb, N, C, C);
    ResidualForward(a.res2.data(), x, a.attproj.data(), int64_t(N) * C);
    LayerNormForward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.res2.data(), p + o.ln2w,
                     p + o.ln2b, N, C);
    LinearForward(a.fch.data(), a.ln2.data(), p + o.fcw, p + o.fcb, N, C, 4 * C);
    GeluForward(a.fch_gelu.data(), a.fch.data(), int64_t(N) * 4 * C);
    LinearForward(a.fcproj.data(), a.fch_gelu.data(), p + o.fcprojw, p + o.fcprojb, N, 4 * C, C);
    ResidualForward(a.res3.data(), a.res2.data(), a.fcproj.data(), int64_t(N) * C);
    x = a.res3.data();
  }
  LayerNormForward(acts_.lnf.data(), acts_.lnf_mean.data(), acts_.lnf_rstd.data(), x,
                   p + layout_.lnfw, p + layout_.lnfb, N, C);
  LinearForward<F>(acts_.logits.data(), acts_.lnf.data(), p + layout_.wte, nullptr, N, C, V);
  return CrossEntropyForward(acts_.probs.data(), acts_.losses.data(), acts_.logits.data(), targets,
                             N, V);
}

template <typename F>
void Gpt<F>::Backward() {
  const GptConfig& c = layout_.config;
  const int B = B_, T = T_, C = c.width, V = c.vocab, NH = c.heads, N = B * T;
  if (grads_.empty()) {
    Logf(LogLevel::kError, "Gpt::Backward on a forward-only model");
    std::abort();
  }
  auto zero = [](std::vector<F>& v) { std::fill(v.begin(), v.end(), F(0)); };
  zero(grads_);
  zero(d_.dlogits);
  zero(d_.dresid);
  const F* p = params_.data();
  F* g = grads_.data();
  constexpr bool kOverwrite = true;
  CrossEntropyBackward(d_.dlogits.data(), acts_.probs.data(), targets_.data(), N, V, F(1) / N);
  LinearBackward<F>(d_.dlnf.data(), g + layout_.wte, nullptr, d_.dlogits.data(), acts_.lnf.data(),
                    p + layout_.wte, N, C, V, kOverwrite);
  const int L = c.layers;
  F* dresid = d_.dresid.data();
  LayerNormBackward(dresid, g + layout_.lnfw, g + layout_.lnfb, d_.dlnf.data(),
                    acts_.layers[L - 1].res3.data(), p + layout_.lnfw, acts_.lnf_mean.data(),
                    acts_.lnf_rstd.data(), N, C);
  // dresid holds d(res3) of layer i on entry, which is also d(fcproj) and part of d(res2).
  for (int i = L - 1; i >= 0; --i) {
    const LayerOffsets& o = layout_.layers[i];
    const Layer& a = acts_.layers[i];
    const F* x = i == 0 ? acts_.encoded.data() : acts_.layers[i - 1].res3.data();
    LinearBackward(d_.dfch_gelu.data(), g + o.fcprojw, g + o.fcprojb, dresid, a.fch_gelu.data(),
                   p + o.fcprojw, N, 4 * C, C, kOverwrite);
    GeluBackward(d_.dfch.data(), a.fch.data(), d_.dfch_gelu.data(), int64_t(N) * 4 * C, kOverwrite);
    LinearBackward(d_.dln2.data(), g + o.fcw, g + o.fcb, d_.dfch.data(), a.ln2.data(), p + o.fcw, N,
                   C, 4 * C, kOverwrite);
    LayerNormBackward(dresid, g + o.ln2w, g + o.ln2b, d_.dln2.data(), a.res2.data(), p + o.ln2w,
                      a.ln2_mean.data(), a.ln2_rstd.data(), N, C);  // dresid = d(res2)
    LinearBackward(d_.datty.data(), g + o.attprojw, g + o.attprojb, dresid, a.atty.data(),
                   p + o.attprojw, N, C, C, kOverwrite);
    zero(d_.dqkv);
    AttentionBackward(d_.dqkv.data(), scratch_.data(), d_.datty.data(), a.qkv.data(), a.att.data(),
                      B, T, C, NH, scratch_parts_);
    LinearBackward(d_.dln1.data(), g + o.qkvw, g + o.qkvb, d_.dqkv.data(), a.ln1.data(), p + o.qkvw,
                   N, C, 3 * C, kOverwrite);
    LayerNormBackward(dresid, g + o.ln1w, g + o.ln1b, d_.dln1.data(), x, p + o.ln1w,
                      a.ln1_mean.data(), a.ln1_rstd.data(), N, C);  // dresid = d(x)
  }
  EncoderBackward(g + layout_.wte, g + layout_.wpe, dresid, inputs_.data(), B, T, C);
}

template class Gpt<float>;
template class Gpt<double>;

}  // namespace diloco::model
