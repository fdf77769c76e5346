// Model families: what common/, server/ and storage/ may know of a trainable model without
// knowing its architecture. A family (the GPT of worker/model/gpt/, the Llama of
// worker/model/llama/) turns its presets and specs into a manifest, names its models by a
// canonical config string, and maps its manifest to and from the Hugging Face layout.
//
// Families register themselves in the binaries that link them (worker/model/families.cc, linked
// whole by every program and test that takes --model); this file holds only the interface and
// the registry, so nothing here names a family's own configuration type.
#pragma once

#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/manifest.h"
#include "common/safetensors.h"

namespace diloco {

// One model of a family: its canonical config string (what `diloco.model` records; parsed
// back by the same family) and its manifest.
struct FamilyModel {
  std::string config;
  Manifest manifest;
};

class ModelFamily {
 public:
  virtual ~ModelFamily() = default;
  // The name recorded in ModelSource::family, e.g. "gpt" or "llama".
  virtual absl::string_view name() const = 0;
  // Whether `spec` is meant for this family (a preset name or the family's spec syntax), so
  // that its errors, not another family's, describe a bad one.
  virtual bool Claims(absl::string_view spec) const = 0;
  // What --help and a refusal list: the presets and the spec syntax.
  virtual std::string Usage() const = 0;
  virtual absl::StatusOr<FamilyModel> Parse(const std::string& spec) const = 0;
  // Hugging Face's folder layout for `config`: config.json and model.safetensors written into
  // `dir` (created if needed), `metadata` in the safetensors header.
  virtual absl::Status WriteHf(const std::string& dir, const std::string& config,
                               const Manifest& manifest, std::span<const float> params,
                               std::map<std::string, std::string> metadata) const = 0;
  // The inverse: a Hugging Face state dict of this family into flat parameters in `manifest`
  // order. Errors name `path` and the tensor.
  virtual absl::StatusOr<std::vector<float>> FlatFromHf(const SafetensorsFile& file,
                                                        const Manifest& manifest,
                                                        const std::string& path) const = 0;
};

// Adds `family` (which must outlive the process) to the registry; a second family of the same
// name is a programming error and aborts.
void RegisterModelFamily(const ModelFamily* family);
// The registered family named `name`, or null.
const ModelFamily* FindModelFamily(absl::string_view name);
// Every registered family, in registration order.
std::vector<const ModelFamily*> ModelFamilies();

// The metadata of every safetensors model file written here (diloco-ctl export, diloco-worker
// --save_model), so either can be loaded and checked the same way: "format" "pt",
// "diloco.model" (`model`: a family's config string, or --model as given for a model declared
// by its tensors) and "diloco.model_fingerprint" (the manifest's, 16 hex).
std::map<std::string, std::string> ModelFileMetadata(const std::string& model, const Manifest& m);

}  // namespace diloco
