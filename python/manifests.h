// The model's tensors as the shards see them, for the diloco_ps module: the manifest of the
// tensors a learner declares, the file `diloco-server --model=manifest:PATH` reads, the tensors
// a `--model` source names (so that a learner can order its parameters as the shards do), and
// the parameters' checksum as diloco-worker logs it.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "common/manifest.h"
#include "common/tensor_decl.h"

namespace diloco::python {

// The declared tensors and their manifest; errors (ValueError) name `source` and the tensor.
Manifest CheckedManifest(const std::vector<std::string>& names,
                         const std::vector<std::vector<int64_t>>& shapes,
                         const std::vector<std::string>& dtypes, const std::string& source,
                         std::vector<DeclaredTensor>* decls);

// 48 bits of the values' XXH3-64, as diloco-worker logs params_checksum.
uint64_t ParamsChecksum(std::span<const float> values);

// Adds checksum, write_manifest and model_source to the module.
void BindManifests(pybind11::module_& m);

}  // namespace diloco::python
