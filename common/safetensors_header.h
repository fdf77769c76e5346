// The tensors a safetensors file declares, from its header alone (no value is read): what
// `--model=safetensors:PATH` and `--model=hf:DIR` take a model's names and shapes from, so any
// PyTorch checkpoint (BF16 or F16 as often as F32) declares its model to the shards.
//
// The header is untrusted and checked as a whole before anything is taken from it: every
// dtype floating point, every tensor non-empty, every data_offsets range inside the file's data
// section and exactly shape x dtype bytes long, no two ranges overlapping and no name given
// twice. Two names over the very same range with the same shape and dtype are tied weights (one
// tensor saved under two names): the tensor is declared once, under the name that comes first in
// the header. Tensors are declared in data order (their offsets), as ReadSafetensors lists them.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tensor_decl.h"

namespace diloco {

struct SafetensorsDecls {
  std::vector<DeclaredTensor> tensors;         // in data order, each tied tensor once
  std::map<std::string, std::string> aliases;  // a tied name dropped -> the name kept
};

// Errors name `path` and the tensor, and say what the header claims.
absl::StatusOr<SafetensorsDecls> ReadSafetensorsDecls(const std::string& path);

}  // namespace diloco
