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
#include "common/manifest.h"

namespace diloco {

struct SafetensorsTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::span<const float> data;  // numel(shape) values
};

// Writes to `path` atomically (a temp file renamed into place after fsync).
absl::Status WriteSafetensors(const std::string& path, std::span<const SafetensorsTensor> tensors,
                              const std::map<std::string, std::string>& metadata);

// The tensors of `manifest` as views into `params` (flat, manifest order); an error when the
// sizes differ.
absl::StatusOr<std::vector<SafetensorsTensor>> ManifestTensors(const Manifest& manifest,
                                                               std::span<const float> params);

// A Hugging Face model folder, what every family's export writes: `dir` (created if needed) with
// config.json (`config_json`) and model.safetensors (`tensors`; `metadata` with "format": "pt"),
// each file written atomically.
absl::Status WriteHfFolder(const std::string& dir, const std::string& config_json,
                           std::span<const SafetensorsTensor> tensors,
                           std::map<std::string, std::string> metadata);

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
