// The safetensors format (Hugging Face), fp32 only: what PyTorch and HF users load.
//   u64 little-endian header length N | N bytes of JSON | raw little-endian tensor data
// The JSON maps each tensor name to {"dtype":"F32","shape":[..],"data_offsets":[begin,end]}
// (offsets relative to the data section) plus "__metadata__": {string: string}; it is padded
// with spaces so the data starts 8-byte aligned. Tensors are laid out in the order given.
//
// The reader exists for tests and tools; it accepts any F32 file and checks every offset
// against the file size (the file is untrusted input).
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace diloco {

struct SafetensorsTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::span<const float> data;  // numel(shape) values
};

// Writes to `path` atomically (a temp file renamed into place after fsync).
absl::Status WriteSafetensors(const std::string& path, std::span<const SafetensorsTensor> tensors,
                              const std::map<std::string, std::string>& metadata);

struct LoadedTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<float> data;
};

struct SafetensorsFile {
  std::vector<LoadedTensor> tensors;  // in data order
  std::map<std::string, std::string> metadata;
};

absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path);

}  // namespace diloco
