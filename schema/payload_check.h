// Checks an encoded payload before any of it is decoded, so a bad one is refused whole (a push
// before it touches a round's accumulator, a quantized download before it touches a worker's
// values): frame count and sizes against the codec's layout, and every value the decoder would
// read as a float (block scales; fp32/bf16/fp8 values) finite; for top-k also its indices (in
// range, a bitmap's count, packed ones increasing: CheckTopK in kernels/topk.h).
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "kernels/codec.h"
#include "schema/wire.h"

namespace diloco::wire {

// `m` carries `count` payloads of a fragment of `numel` elements, one after the other, each in
// chunk frames (wire::PayloadFrames): a Push or InitFragment carries one, a FragmentUpdate of
// quantized updates one per update.
absl::Status CheckEncodedPayload(const Message& m, kernels::Codec codec, uint64_t numel,
                                 uint64_t count = 1);

}  // namespace diloco::wire
