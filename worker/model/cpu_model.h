// A model family's network on the CPU, as the family-neutral CPU trainer (cpu_trainer.h) and the
// evaluators (evaluate.h, heldout.h) drive it: flat fp32 parameters and gradients in the
// family's manifest order, activations for one (batch, seq_len) allocated once, a forward pass
// that returns the mean cross-entropy and keeps the per-token losses, a backward pass that fills
// the gradients. The GPT (gpt/gpt_trainer_family.cc) and the Llama (llama/llama_trainer_family.cc)
// adapt their models to it; what a family's model is made of stays in its folder.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <utility>

#include "common/manifest.h"

namespace diloco::model {

class CpuModel {
 public:
  virtual ~CpuModel() = default;
  virtual const Manifest& manifest() const = 0;
  virtual int batch() const = 0;
  virtual int seq_len() const = 0;
  virtual std::span<float> params() = 0;
  // Empty for a forward-only model (made for evaluation).
  virtual std::span<float> grads() = 0;
  // inputs and targets are (batch, seq_len) token ids below the vocabulary. Returns the mean
  // loss (nats per token); losses() holds each token's.
  virtual double Forward(const int32_t* inputs, const int32_t* targets) = 0;
  virtual std::span<const float> losses() const = 0;
  // Gradients of the last Forward's mean loss (training models only).
  virtual void Backward() = 0;
  // The family's initial parameters theta(0) from `seed`.
  virtual void Init(uint64_t seed) = 0;
};

// A family's model type M (params(), grads(), Forward, losses(), Backward, batch(), seq_len())
// as a CpuModel: `manifest` is M's own (it lives as long as the model), `init` writes theta(0).
template <typename M>
class CpuModelOf final : public CpuModel {
 public:
  using InitFn = void (*)(M& model, uint64_t seed);
  CpuModelOf(std::unique_ptr<M> m, const Manifest& manifest, InitFn init)
      : m_(std::move(m)), manifest_(manifest), init_(init) {}
  const Manifest& manifest() const override { return manifest_; }
  int batch() const override { return m_->batch(); }
  int seq_len() const override { return m_->seq_len(); }
  std::span<float> params() override { return m_->params(); }
  std::span<float> grads() override { return m_->grads(); }
  double Forward(const int32_t* inputs, const int32_t* targets) override {
    return m_->Forward(inputs, targets);
  }
  std::span<const float> losses() const override { return m_->losses(); }
  void Backward() override { m_->Backward(); }
  void Init(uint64_t seed) override { init_(*m_, seed); }

 private:
  std::unique_ptr<M> m_;
  const Manifest& manifest_;
  InitFn init_;
};

}  // namespace diloco::model
