// safetensors files (the Hugging Face format): 8 bytes little-endian header length N, N bytes
// of JSON {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
// "__metadata__": {"k": "v"}}, then the raw little-endian tensor bytes; offsets are relative to
// the end of the header. Only what GPT parameter exchange needs: F32 tensors, read whole.
// The worker writes checkpoints of its model with it and the server's export can share it.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/manifest.h"

namespace diloco::model {

struct SafetensorsTensor {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<float> data;  // filled for F32 tensors only
};

struct SafetensorsContents {
  std::map<std::string, SafetensorsTensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Parses and validates a whole file: header length and JSON, dtypes, shapes against byte
// ranges, ranges inside the file and not overlapping.
absl::StatusOr<SafetensorsContents> ReadSafetensors(const std::string& path);

// Every tensor of `manifest` (F32, same shape) gathered into a flat buffer in manifest order.
// Missing or mis-shaped tensors are errors; extra tensors are ignored.
absl::StatusOr<std::vector<float>> ReadSafetensorsParams(const std::string& path,
                                                         const Manifest& manifest);

// Writes a flat buffer in manifest order as F32 tensors named as in the manifest. The header is
// padded with spaces to a multiple of 8 bytes so the data is aligned.
absl::Status WriteSafetensors(const std::string& path, const Manifest& manifest,
                              std::span<const float> params,
                              const std::map<std::string, std::string>& metadata = {});

}  // namespace diloco::model
