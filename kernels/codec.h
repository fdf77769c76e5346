// Delta codecs: how a worker's fp32 pseudo-gradient (or a fragment download) is packed for the
// wire, and how the server unpacks it straight into its fp32 accumulator.
//
// Encoded layout of a block codec (int8, int4, fp8): one fp32 scale per block, all scales
// first, then the packed values (int4: two per byte, low nibble first). fp32 and bf16 have no
// scales. Blocks are `block` consecutive values (64..2048); the last block may be short.
//
// These free functions are the fast CPU path (vectorised, multi-threaded over blocks); the
// scalar reference lives in kernels/reference.h and the CUDA path in kernels/cuda.h. Fast paths
// produce the same bytes as the reference (see kernels/README in docs/kernels.md for bounds).
// Non-finite inputs (NaN, Inf) are refused with InvalidArgument and nothing is written.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace diloco::kernels {

enum class CodecKind : uint8_t { kFp32 = 0, kBf16 = 1, kFp8E4M3 = 2, kInt8 = 3, kInt4 = 4 };

struct Codec {
  CodecKind kind = CodecKind::kInt8;
  uint32_t block = 256;
};

absl::Status ValidateCodec(Codec c);
// "fp32", "bf16", "fp8", "int8", "int4", optionally ":<block>" (e.g. "int4:128").
absl::StatusOr<Codec> ParseCodec(const std::string& s);
std::string CodecName(Codec c);
// Bytes of the encoded form of n values.
size_t EncodedSize(Codec c, size_t n);

// out.size() must equal EncodedSize(c, x.size()).
absl::Status Encode(Codec c, std::span<const float> x, std::span<uint8_t> out);
// out = deQ(in); in.size() must equal EncodedSize(c, out.size()).
absl::Status Decode(Codec c, std::span<const uint8_t> in, std::span<float> out);
// acc += weight * deQ(in): the server's fused merge step.
absl::Status DecodeAccumulate(Codec c, std::span<const uint8_t> in, float weight,
                              std::span<float> acc);
// Error feedback in one pass: e += delta; out = Q(e); e -= deQ(out).
absl::Status ErrorFeedbackEncode(Codec c, std::span<const float> delta, std::span<float> err,
                                 std::span<uint8_t> out);

}  // namespace diloco::kernels
