// Checks an encoded payload before any of it touches a round's accumulator, so a bad push is
// refused whole: frame count and sizes against the codec's layout, and every value the decoder
// would read as a float (block scales; fp32/bf16/fp8 values) finite.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "kernels/codec.h"
#include "schema/wire.h"

namespace diloco::server {

// `m` is a Push or InitFragment for a fragment of `numel` elements.
absl::Status CheckEncodedPayload(const wire::Message& m, kernels::Codec codec, uint64_t numel);

}  // namespace diloco::server
