// The Llama model on the CPU: parameters and gradients as flat buffers in LlamaManifest order,
// activations for one (B, T) allocated once. Forward computes the mean cross-entropy; Backward
// fills grads() (zeroed first). Templated like ../layers.h, whose GEMM, linear, causal attention
// and cross-entropy it reuses: float for training, double for the gradient checks.
//
// Per block: h = RMSNorm(x) * w_in; q, k, v = h Wq^T, h Wk^T, h Wv^T; rotary embedding on q and
// k (Hugging Face's rotate_half pairing: channel i with i + D/2 of each head); every group of
// heads / kv_heads query heads attends to one k, v head; x += attn Wo^T; h = RMSNorm(x) * w_post;
// x += (silu(h Wg^T) * h Wu^T) Wd^T. Then logits = (RMSNorm(x) * w_norm) lm_head^T.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "common/manifest.h"
#include "worker/model/llama/llama_config.h"

namespace diloco::model {

template <typename F>
class LlamaModel {
 public:
  // batch >= 1, 1 <= seq_len <= config.context.
  static absl::StatusOr<std::unique_ptr<LlamaModel>> Create(const LlamaConfig& config, int batch,
                                                            int seq_len);

  const LlamaConfig& config() const { return c_; }
  const Manifest& manifest() const { return manifest_; }
  int batch() const { return B_; }
  int seq_len() const { return T_; }
  std::span<F> params() { return params_; }
  std::span<F> grads() { return grads_; }

  // inputs and targets are (B, T) token ids < vocab. Returns the mean loss (nats per token).
  double Forward(const int32_t* inputs, const int32_t* targets);
  void Backward();

  std::span<const F> losses() const { return losses_; }

 private:
  struct Offsets {
    uint64_t wq, wk, wv, wo, wg, wu, wd, w_in, w_post;
  };
  struct Layer {
    std::vector<F> rstd1, h1, qkv, att, atty, x2, rstd2, h2, g, u, a, out;
  };
  LlamaModel() = default;

  LlamaConfig c_;
  Manifest manifest_;
  int B_ = 0, T_ = 0;
  uint64_t embed_ = 0, norm_ = 0, head_ = 0;
  std::vector<Offsets> off_;
  std::vector<F> params_, grads_;
  std::vector<double> cos_, sin_;                                     // (T, D/2)
  std::vector<F> x0_, k_, v_, rstdf_, hf_, logits_, probs_, losses_;  // k_, v_: scratch
  std::vector<Layer> layers_;
  std::vector<F> dres_, dh_, dlogits_, dqkv_, dq_, dk_, dv_, datty_, dg_, du_, da_, scratch_;
  std::vector<int32_t> inputs_, targets_;
};

// Llama's initialisation in the style of Hugging Face's: matrices N(0, 0.02) from a SplitMix64
// stream of `seed`, norm weights 1.
void InitLlama(const Manifest& manifest, uint64_t seed, std::span<float> params);

}  // namespace diloco::model
