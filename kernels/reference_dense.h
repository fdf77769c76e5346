// Scalar reference of the dense codecs (fp32, bf16, fp8, int8, int4; rules in docs/kernels.md):
// one plain loop over the values, the truth the fast path (fast_impl.inc) and the CUDA kernels
// are tested against. Used through the codec table (codec_table.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/codec_kind.h"

namespace diloco::kernels::ref {

// x[0, n) finite; out has EncodedBytes(c, n) bytes.
void DenseEncode(Codec c, const float* x, size_t n, uint8_t* out);
// out = deQ (acc false) or out += w * deQ (acc true); the scales passed the reference's check.
void DenseDecode(Codec c, const uint8_t* in, size_t n, float w, bool acc, float* out);

}  // namespace diloco::kernels::ref
