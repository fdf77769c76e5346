// What `--model` names, in every program that takes it: the model whose tensors the plan cuts,
// the shards serve and the learners push. Any model, not only the built-in GPT:
//   a preset or spec of a registered model family (common/model_family.h), e.g. GPT's tiny,
//                                  small, gpt2-124m, L=..,H=..,C=..,T=..,V=.. or Llama's
//                                  llama-tiny: what the C++ trainers train
//   safetensors:PATH               the tensors a safetensors file's header declares
//                                  (common/safetensors_header.h)
//   hf:DIR                         a Hugging Face model folder: config.json and
//                                  model.safetensors or a sharded index (common/hf_folder.h)
//   manifest:PATH                  a manifest JSON file (common/manifest_json.h), e.g. one
//                                  `diloco-ctl manifest --out` wrote
// Only names and shapes are taken; no value is read. The manifest's fingerprint is the same for
// every source of the same names and shapes in the same order, and a GPT preset's is what it
// has always been, so existing stores keep their identity. Which families a program knows is
// what it links (worker/model/families.cc).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/manifest.h"
#include "common/model_family.h"
#include "common/tensor_decl.h"

namespace diloco {

struct ModelSource {
  std::string spec;  // as given
  // A family's preset or spec: the family's name and its canonical config string (what the
  // C++ trainers of that family train). Both empty for a model declared by its tensors.
  std::string family;
  std::string config;
  Manifest manifest;
  std::vector<DeclaredTensor> tensors;  // the manifest's, with the source's dtypes where known
};

// Errors name the source (path or spec), the tensor and the cause.
absl::StatusOr<ModelSource> LoadModelSource(const std::string& spec);

}  // namespace diloco
