// Internal helpers shared by the reference and fast codecs: block counts, payload offsets and the
// argument checks every entry point runs before touching memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/status.h"
#include "kernels/codec_kind.h"

namespace diloco::kernels::internal {

inline size_t NumBlocks(Codec c, size_t n) {
  return HasScales(c.kind) ? (n + c.block - 1) / c.block : 0;
}
// Byte offset of the packed values (after the scales).
inline size_t PayloadOffset(Codec c, size_t n) { return NumBlocks(c, n) * sizeof(float); }

// ValidateCodec + the encoded size matches n values.
absl::Status CheckSizes(Codec c, size_t n, size_t encoded_bytes);
absl::Status NonFiniteError(const char* what);

}  // namespace diloco::kernels::internal
