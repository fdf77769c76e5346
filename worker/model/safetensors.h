// The model's parameters as a safetensors file (format and reader/writer: common/safetensors.h):
// one F32 tensor per manifest entry, named and shaped as in the manifest; and a model to start
// from, in any floating-point dtype, from a file or a Hugging Face folder (ReadModelForInitInto).
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

// A model to start from (diloco-worker --init_from), read into `out` (manifest.total_elements()
// values: no second copy of a large model), checked against `manifest` (the --model the fleet
// serves) tensor by tensor before anything is uploaded:
//   - a safetensors file, or a Hugging Face folder (config.json beside model.safetensors or a
//     sharded index; common/hf_folder.h): every header is checked whole first
//     (common/safetensors_header.h: offsets inside the file and exactly shape x dtype, no
//     overlaps), then each tensor's values are read, any floating-point dtype (F64, F32, F16,
//     BF16, F8_E4M3, F8_E5M2) widened to fp32 (F64 rounded), straight into the flat buffer;
//   - under the manifest's own names: every manifest tensor must be there with its shape and
//     no other tensor may be, except a name tied to one that is (two names over the same bytes);
//   - or GPT-2 in Hugging Face's layout (worker/model/gpt/gpt_hf.h: "transformer." names, Conv1D
//     matrices [in, out]), when the manifest is the built-in GPT's and the file is not in its
//     own names (diloco-ctl export --format=hf of the built-in GPT).
// A name, shape or dtype mismatch, a missing config.json or index, or a header that lies is an
// error naming the file and the tensor. On an error `out` may have been partly written.
absl::Status ReadModelForInitInto(const std::string& path, const Manifest& manifest,
                                  std::span<float> out);

// n values of a floating-point safetensors dtype (little-endian bytes) as fp32; false for a
// dtype that is not one of FloatDtypeBytes' (common/tensor_decl.h).
bool WidenToF32(const std::string& dtype, const char* bytes, size_t n, float* out);

// Writes a flat buffer in manifest order as F32 tensors named as in the manifest (atomically).
absl::Status WriteSafetensors(const std::string& path, const Manifest& manifest,
                              std::span<const float> params,
                              const std::map<std::string, std::string>& metadata = {});

// Whether WriteSafetensors(path, ...) can succeed later (checked before a long run, not after
// it): `path` is not a directory and its directory exists and is writable. The error names the
// path and the reason.
absl::Status CheckWritable(const std::string& path);

}  // namespace diloco::model
