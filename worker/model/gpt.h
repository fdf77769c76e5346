// The GPT-2 model on the CPU: parameters and their gradients as flat buffers in manifest order,
// activations for one (B, T) allocated once and reused by every step (no allocation per step).
// Forward computes the mean cross-entropy; Backward fills grads() (it zeroes them first).
// Templated like layers.h: float for training, double for the gradient checks.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/param_layout.h"

namespace diloco::model {

template <typename F>
class Gpt {
 public:
  // batch >= 1, 1 <= seq_len <= config.context. training = false: forward only (no gradient
  // buffers, about half the memory; for evaluation), Backward must not be called.
  static absl::StatusOr<std::unique_ptr<Gpt>> Create(const GptConfig& config, int batch,
                                                     int seq_len, bool training = true);

  // Bytes of activations a forward-only model of this shape allocates (besides its parameters).
  static size_t ForwardActivationBytes(const GptConfig& config, int batch, int seq_len);

  const ParamLayout& layout() const { return layout_; }
  int batch() const { return B_; }
  int seq_len() const { return T_; }
  std::span<F> params() { return params_; }
  std::span<F> grads() { return grads_; }

  // inputs and targets are (B, T) token ids < vocab. Returns the mean loss (nats per token).
  double Forward(const int32_t* inputs, const int32_t* targets);
  // Gradients of the last Forward's mean loss.
  void Backward();

  // Results of the last Forward, for tests: logits (B, T, V) and per-token losses (B, T).
  std::span<const F> logits() const { return acts_.logits; }
  std::span<const F> losses() const { return acts_.losses; }

 private:
  struct Layer {
    std::vector<F> ln1, ln1_mean, ln1_rstd, qkv, atty, att, attproj, res2;
    std::vector<F> ln2, ln2_mean, ln2_rstd, fch, fch_gelu, fcproj, res3;
  };
  struct Acts {
    std::vector<F> encoded;
    std::vector<Layer> layers;
    std::vector<F> lnf, lnf_mean, lnf_rstd, logits, probs, losses;
  };
  // Gradients of the activations, one layer at a time: the residual stream's gradient is one
  // (N, C) buffer that every layer's LayerNorm backward adds into (the residual additions pass
  // it through unchanged), and a layer's inner gradients are scratch the next layer down
  // overwrites. Only dresid, dlogits and dqkv accumulate, so only they are cleared per step.
  struct Grads {
    std::vector<F> dlogits, dlnf, dresid, dfch_gelu, dfch, dln2, datty, dqkv, dln1;
  };
  Gpt() = default;
  void Allocate(Acts& a);
  void AllocateGrads();

  ParamLayout layout_;
  int B_ = 0, T_ = 0;
  std::vector<F> params_, grads_;
  Acts acts_;
  Grads d_;
  std::vector<F> scratch_;  // scratch_parts_ * T*T for the attention backward
  int scratch_parts_ = 1;
  std::vector<int32_t> inputs_, targets_;
};

}  // namespace diloco::model
