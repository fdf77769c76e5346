// The model manifest: the ordered list of named fp32 tensors a worker trains. Server and worker
// both derive the plan from it, and its fingerprint identifies the model on the wire.
// Parameters live in one flat fp32 buffer in manifest order; `offset` is a tensor's start in it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace diloco {

struct TensorSpec {
  std::string name;
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // elements before this tensor in the flat buffer
  uint64_t numel() const;
};

class Manifest {
 public:
  Manifest() = default;
  // Offsets are assigned in order; names must be unique and shapes positive.
  static absl::StatusOr<Manifest> Create(std::vector<TensorSpec> tensors);

  const std::vector<TensorSpec>& tensors() const { return tensors_; }
  uint64_t total_elements() const { return total_; }
  // FNV-1a/XXH3 over names, shapes and dtype: equal manifests, equal fingerprints.
  uint64_t fingerprint() const { return fingerprint_; }
  const TensorSpec* Find(const std::string& name) const;

 private:
  std::vector<TensorSpec> tensors_;
  uint64_t total_ = 0;
  uint64_t fingerprint_ = 0;
};

}  // namespace diloco
