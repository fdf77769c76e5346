// The Llama family's model configuration and the manifest it defines: a decoder with RMSNorm,
// rotary position embedding, a SwiGLU MLP, grouped-query attention (kv_heads divides heads) and
// an untied readout. Tensor names and shapes are Hugging Face's LlamaForCausalLM state dict
// (model.embed_tokens, model.layers.{i}.*, model.norm, lm_head) in the order of its
// named_parameters(), matrices [out, in] as in torch.nn.Linear: the Hugging Face layout is the
// manifest itself, and a PyTorch learner of the same model joins the same fleet.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "common/manifest.h"

namespace diloco {

struct LlamaConfig {
  int vocab = 256;
  int context = 64;
  int layers = 2;
  int heads = 4;
  int kv_heads = 2;
  int width = 64;  // heads x head size
  int ffn = 172;   // the SwiGLU's hidden width
  double rope_theta = 10000;
  double rms_eps = 1e-5;

  int head_size() const { return width / heads; }
};

// Presets "llama-tiny" (CI-sized) and "llama-small", or "llama:L=..,H=..,KV=..,C=..,F=..,T=..,V=.."
// overriding the tiny preset (the form LlamaConfigString writes).
absl::StatusOr<LlamaConfig> ParseLlamaConfig(const std::string& spec);
std::string LlamaConfigString(const LlamaConfig& c);
absl::StatusOr<Manifest> LlamaManifest(const LlamaConfig& c);

}  // namespace diloco
