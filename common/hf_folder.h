// The tensors of a Hugging Face model folder (`--model=hf:DIR`), from the safetensors headers
// alone: DIR/config.json (required: it is what makes a folder a model) beside either
// DIR/model.safetensors or DIR/model.safetensors.index.json, whose "weight_map" names the file
// of every tensor of a checkpoint sharded over several files. Each file's header is read and
// checked (common/safetensors_header.h); the index and the files must agree, tensor by tensor.
//
// Order: the files by name (model-00001-of-00004.safetensors, ...), and within each file its
// data order; tied weights appear once. pytorch_model.bin checkpoints are not read: save the
// model with safe_serialization=True (the default of recent transformers).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/tensor_decl.h"

namespace diloco {

// Errors name the folder or file and the tensor.
absl::StatusOr<std::vector<DeclaredTensor>> ReadHfFolderDecls(const std::string& dir);

// The files of such a folder, once ReadHfFolderDecls has accepted it (its errors, else):
// config.json and the weights, model.safetensors alone or the files the index names, in name
// order. What reads a folder's values (diloco-worker --init_from) and what carries its
// config.json into an export (diloco-ctl export --format=hf) find them here.
struct HfFolderFiles {
  std::string config;                // DIR/config.json
  std::vector<std::string> weights;  // DIR/model.safetensors, or DIR/<each indexed file>
};
absl::StatusOr<HfFolderFiles> FindHfFolderFiles(const std::string& dir);

}  // namespace diloco
