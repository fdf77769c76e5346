// A model's tensors as a source declares them (a safetensors header, a Hugging Face folder, a
// manifest JSON file): name, shape and the source's dtype, values unread. ManifestFromDecls turns
// them into the Manifest the plan is cut from, refusing what no learner could push: a duplicate
// name, a tensor with no elements, a scalar, a dtype that is not floating point.
//
// Whatever a source's dtype (BF16, F16, F8, F64), a manifest tensor travels as fp32: the wire,
// the shards and the fingerprint know only names and shapes, so a BF16 checkpoint and an F32
// one of the same model are the same model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/manifest.h"

namespace diloco {

struct DeclaredTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::string dtype;  // the source's safetensors dtype name ("F32", "BF16"); empty: not given
};

// Bytes per element of a floating-point safetensors dtype (F64, F32, F16, BF16, F8_E4M3,
// F8_E5M2); nullopt for any other name (integers, BOOL, unknown).
std::optional<int> FloatDtypeBytes(const std::string& dtype);

// Checks one declared tensor: a non-empty name, a known floating-point dtype when one is given,
// at least one dimension and every dimension positive. The error names `source` and the tensor.
absl::Status CheckDeclared(const DeclaredTensor& t, const std::string& source);

// The manifest of `tensors`, in their order, after CheckDeclared on each and a check that no
// name appears twice. Errors name `source` (a path or a --model value) and the tensor.
absl::StatusOr<Manifest> ManifestFromDecls(const std::vector<DeclaredTensor>& tensors,
                                           const std::string& source);

// "[a,b,c]" for error messages and diffs.
std::string ShapeString(const std::vector<int64_t>& shape);

}  // namespace diloco
