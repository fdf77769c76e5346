// Delta codecs: how a worker's fp32 pseudo-gradient (or a fragment download) is packed for the
// wire, and how the server unpacks it straight into its fp32 accumulator.
//
// Encoded layout of a block codec (int8, int4, fp8): one fp32 scale per block, all scales
// first, then the packed values (int4: two per byte, low nibble first). fp32 and bf16 have no
// scales. Blocks are `block` consecutive values (64..2048, a multiple of 8); the last block may
// be short. All multi-byte values are little-endian. Exact rules: docs/kernels.md.
//
// These free functions are the fast CPU path (vectorised, multi-threaded over blocks); the
// scalar reference lives in kernels/reference.h and the CUDA path in kernels/cuda.h. Fast paths
// produce the same bytes as the reference (docs/kernels.md).
// Non-finite inputs (NaN, Inf; for ErrorFeedbackEncode also a non-finite err + delta) are
// refused with InvalidArgument and nothing is written (neither `out` nor `err`). Decode and
// DecodeAccumulate refuse non-finite or negative scales before writing anything.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "kernels/codec_kind.h"

namespace diloco::kernels {

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
