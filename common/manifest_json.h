// The manifest as a small JSON file (`--model=manifest:PATH`; written by `diloco-ctl manifest
// --model=... --out=PATH`): a model declared by its tensors' names and shapes alone, so a fleet
// can be planned, served and benchmarked without the weights at hand.
//
//   {"format": "diloco-manifest", "version": 1,
//    "tensors": [{"name": "model.embed_tokens.weight", "shape": [32000, 4096], "dtype": "BF16"},
//                ...],
//    "source": "hf:/models/llama-8b", "fingerprint": "0123456789abcdef", "parameters": 8030261248}
//
// Required: "format", "version" (1) and "tensors", a non-empty array in manifest order, each
// with "name" and "shape" (positive integers). Optional: each tensor's "dtype" (the source's;
// it must be floating point, and it is informative only: every tensor travels as fp32), and the
// informative "source", "fingerprint" (16 hex digits: when present it must be the tensors'
// fingerprint, which catches a hand-edited file) and "parameters" (when present, the total).
// Any other key is refused, so a misspelt one is not silently ignored.
#pragma once

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/manifest.h"
#include "common/tensor_decl.h"

namespace diloco {

// The declared tensors of the file at `path`, checked (ManifestFromDecls' checks, and the
// fingerprint and parameter count when given). Errors name the path and the cause.
absl::StatusOr<std::vector<DeclaredTensor>> ReadManifestJson(const std::string& path);

// The file's text for `tensors` (their manifest `m`), with `source` when not empty.
std::string ManifestJson(const std::vector<DeclaredTensor>& tensors, const Manifest& m,
                         const std::string& source);

// ManifestJson written atomically (common/atomic_file.h).
absl::Status WriteManifestJson(const std::string& path, const std::vector<DeclaredTensor>& tensors,
                               const Manifest& m, const std::string& source);

}  // namespace diloco
