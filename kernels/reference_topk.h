// Scalar reference of the top-k codec (rules in kernels/topk.h), written apart from the fast
// path: a full sort instead of nth_element, one bit at a time. Used by kernels/reference.cc.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/codec_kind.h"

namespace diloco::kernels::ref {

// x[0, n) finite; out has EncodedBytes(c, n) bytes.
void TopKEncode(Codec c, const float* x, size_t n, uint8_t* out);
// out = deQ (acc false) or out += w * deQ at the sent entries (acc true); `in` passed CheckTopK.
void TopKDecode(Codec c, const uint8_t* in, size_t n, float w, bool acc, float* out);

}  // namespace diloco::kernels::ref
