// The Llama family in Hugging Face's layout, so that `LlamaForCausalLM.from_pretrained(DIR)`
// opens an export as it is: DIR/config.json (LlamaConfig) and DIR/model.safetensors holding the
// manifest's tensors under their own names (they are the state dict's). The readout is untied
// (tie_word_embeddings false): lm_head.weight is written.
#pragma once

#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/manifest.h"
#include "common/safetensors.h"
#include "worker/model/llama/llama_config.h"

namespace diloco {

// config.json for `config`: LlamaConfig's fields (SiLU, no biases, fp32).
std::string LlamaHfConfigJson(const LlamaConfig& config);

// Creates `dir` if needed and writes config.json and model.safetensors into it, each atomically,
// `metadata` in the safetensors header with "format": "pt".
absl::Status WriteLlamaHfModel(const std::string& dir, const LlamaConfig& config,
                               const Manifest& manifest, std::span<const float> params,
                               std::map<std::string, std::string> metadata);

// A LlamaForCausalLM state dict into flat parameters in `manifest` order: every tensor there
// with its shape; the rotary buffers of older files (rotary_emb.inv_freq) are skipped; any other
// tensor is refused. Errors name `path` and the tensor.
absl::StatusOr<std::vector<float>> FlatFromLlamaHf(const SafetensorsFile& file,
                                                   const Manifest& manifest,
                                                   const std::string& path);

}  // namespace diloco
