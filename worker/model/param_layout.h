// Where each GPT tensor lives in the flat parameter buffer, resolved once from GptManifest by
// name (so the model code cannot drift from the manifest the server plans with), plus the
// GPT-2 initialisation of that buffer. Shared by the CPU and CUDA backends.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "common/manifest.h"
#include "worker/model/gpt/gpt_config.h"
#include "worker/model/layer_offsets.h"

namespace diloco::model {

struct ParamLayout {
  GptConfig config;
  Manifest manifest;
  uint64_t wte = 0, wpe = 0, lnfw = 0, lnfb = 0;
  std::vector<LayerOffsets> layers;
  uint64_t total = 0;
};

// Checks the config (positive sizes, width divisible by heads) and resolves every offset.
absl::StatusOr<ParamLayout> MakeParamLayout(const GptConfig& config);

// GPT-2 initialisation, deterministic in seed: weight matrices and embeddings N(0, 0.02), the
// residual projections (attn.c_proj, mlp.c_proj) N(0, 0.02 / sqrt(2L)), biases 0, LayerNorm
// gains 1. Normals come from a portable Box-Muller over splitmix64, identical on every platform.
void InitGpt2(const ParamLayout& layout, uint64_t seed, std::span<float> params);

}  // namespace diloco::model
