// The global model in Hugging Face's GPT-2 layout, so that `GPT2LMHeadModel.from_pretrained(DIR)`
// opens an export as it is: DIR/config.json (GPT2Config) and DIR/model.safetensors.
//
// What differs from the project's own layout (GptManifest: GPT2Model's names, matrices
// [out, in] as in torch.nn.Linear): every name gets GPT2LMHeadModel's "transformer." prefix,
// and the four matrices of each block that Hugging Face holds in Conv1D modules (attn.c_attn,
// attn.c_proj, mlp.c_fc, mlp.c_proj) are stored transposed, [in, out]. The LM head is tied to
// the token embedding (tie_word_embeddings), so, as save_pretrained does for a tied model, no
// lm_head.weight is written. The model is pre-LN GPT-2 with the tanh GELU ("gelu_new"),
// LayerNorm epsilon 1e-5 and no dropout, exactly what the workers train.
#pragma once

#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/manifest.h"
#include "common/safetensors.h"
#include "worker/model/gpt/gpt_config.h"

namespace diloco {

// Whether a manifest tensor is one Hugging Face stores as Conv1D ([in, out]).
bool IsHfConv1D(const std::string& manifest_name);

// The tensors of a GPT2LMHeadModel state dict holding `params` (manifest order). Transposed
// matrices are built in `scratch` (which must outlive the result); the others point into
// `params`.
std::vector<SafetensorsTensor> HfTensors(const Manifest& manifest, std::span<const float> params,
                                         std::vector<std::vector<float>>* scratch);

// The inverse of HfTensors: a GPT2LMHeadModel state dict into flat parameters in `manifest`
// order. Every manifest tensor must be there as "transformer." + its name with Hugging Face's
// shape; lm_head.weight, if present, must equal the token embedding (this model ties them);
// the attention-mask buffers of older GPT-2 files (attn.bias, attn.masked_bias) are skipped;
// any other tensor is refused. Errors name `path` and the tensor.
absl::StatusOr<std::vector<float>> FlatFromHf(const SafetensorsFile& file, const Manifest& manifest,
                                              const std::string& path);

// config.json for `config`: GPT2Config's fields.
std::string HfConfigJson(const GptConfig& config);

// Creates `dir` if needed and writes config.json and model.safetensors into it, each
// atomically. `metadata` goes into the safetensors header with "format": "pt" (which
// transformers requires).
absl::Status WriteHfModel(const std::string& dir, const GptConfig& config, const Manifest& manifest,
                          std::span<const float> params,
                          std::map<std::string, std::string> metadata);

}  // namespace diloco
