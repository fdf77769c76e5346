// The GPT family's model configuration and the manifest it defines. Every program reaches it
// through the family registry (common/model_family.h, gpt_family.cc): a shard derives the same
// manifest (hence the same plan) from the same flags, without ever running the model.
//
// Tensor order and names follow Hugging Face GPT-2 (wte, wpe, h.{i}.*, ln_f); matrices are
// stored [out, in] as in torch.nn.Linear. The LM head is tied to wte.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "common/manifest.h"

namespace diloco {

struct GptConfig {
  int vocab = 256;
  int context = 64;
  int layers = 2;
  int heads = 4;
  int width = 64;
};

// Named presets: "tiny" (CI-sized; the README's local cluster), "small" (the binaries' default
// and the single-process built-in job), "gpt2-124m", "gpt2-350m". Or a spec
// "L=4,H=4,C=128,T=128,V=256" overriding the tiny preset.
absl::StatusOr<GptConfig> ParseGptConfig(const std::string& spec);
std::string GptConfigString(const GptConfig& c);
absl::StatusOr<Manifest> GptManifest(const GptConfig& c);

}  // namespace diloco
