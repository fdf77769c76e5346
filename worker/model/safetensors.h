// The model's parameters as a safetensors file (format and reader/writer: common/safetensors.h):
// one F32 tensor per manifest entry, named and shaped as in the manifest.
#pragma once

#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/manifest.h"

namespace diloco::model {

// Every tensor of `manifest` (F32, same shape) gathered into a flat buffer in manifest order.
// Missing or mis-shaped tensors are errors naming the tensor; extra tensors are ignored.
absl::StatusOr<std::vector<float>> ReadSafetensorsParams(const std::string& path,
                                                         const Manifest& manifest);

// A model file to start from (diloco-worker --init_from): the project's layout (diloco-ctl
// export, --save_model) or Hugging Face's GPT-2 layout (model.safetensors of
// `diloco-ctl export --format=hf`, or the directory holding it; common/hf_layout.h). Every
// manifest tensor must be there, F32, with its shape, and no other tensor may be: a name,
// shape or dtype mismatch is an error naming the tensor.
absl::StatusOr<std::vector<float>> ReadModelForInit(const std::string& path,
                                                    const Manifest& manifest);

// Writes a flat buffer in manifest order as F32 tensors named as in the manifest (atomically).
absl::Status WriteSafetensors(const std::string& path, const Manifest& manifest,
                              std::span<const float> params,
                              const std::map<std::string, std::string>& metadata = {});

// Whether WriteSafetensors(path, ...) can succeed later (checked before a long run, not after
// it): `path` is not a directory and its directory exists and is writable. The error names the
// path and the reason.
absl::Status CheckWritable(const std::string& path);

}  // namespace diloco::model
