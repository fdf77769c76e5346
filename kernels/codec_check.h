// The checks of an encoded chunk that the codec table (codec_table.h) points at, for the dense
// codecs (top-k's are CheckTopK, topk.h). Each takes a chunk of n values whose size the caller
// has already matched to EncodedSize(c, n), reads it only, and names the cause when it refuses.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "kernels/codec_kind.h"

namespace diloco::kernels::internal {

// Wire checks (what a shard refuses before it queues a push).
// fp32: every value finite.
absl::Status CheckFp32Values(Codec c, std::span<const uint8_t> in, size_t n);
// bf16: no value with an all-ones exponent (Inf or NaN).
absl::Status CheckBf16Values(Codec c, std::span<const uint8_t> in, size_t n);
// int8, int4: every block scale finite.
absl::Status CheckScalesFinite(Codec c, std::span<const uint8_t> in, size_t n);
// fp8: every block scale finite and no code is E4M3's NaN (S.1111.111).
absl::Status CheckFp8Chunk(Codec c, std::span<const uint8_t> in, size_t n);

// Decoder checks (before the fast path writes anything).
// Every block scale finite and >= +0, compared as raw bits (so -0 is refused too).
absl::Status CheckScalesNonNegative(Codec c, std::span<const uint8_t> in, size_t n);
// Nothing to check: every bit pattern decodes (fp32, bf16).
absl::Status CheckNothing(Codec c, std::span<const uint8_t> in, size_t n);

}  // namespace diloco::kernels::internal
