// Scalar CPU reference of every kernel: one plain loop per function, no threads, no SIMD. This is
// the readable truth the fast CPU path (codec.h, optim.h) and the CUDA path (cuda.h) are tested
// against byte for byte. Same contracts as the fast functions of the same name.
#pragma once

#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "kernels/codec_kind.h"
#include "kernels/optim_params.h"

namespace diloco::kernels::ref {

absl::Status Encode(Codec c, std::span<const float> x, std::span<uint8_t> out);
absl::Status Decode(Codec c, std::span<const uint8_t> in, std::span<float> out);
absl::Status DecodeAccumulate(Codec c, std::span<const uint8_t> in, float weight,
                              std::span<float> acc);
absl::Status ErrorFeedbackEncode(Codec c, std::span<const float> delta, std::span<float> err,
                                 std::span<uint8_t> out);

void NesterovStep(const NesterovParams& p, std::span<float> theta, std::span<float> m,
                  std::span<const float> d);
void AdamWStep(const AdamWParams& p, int64_t step, std::span<float> param,
               std::span<const float> grad, std::span<float> m, std::span<float> v);
void Delta(std::span<const float> anchor, std::span<const float> local, std::span<float> delta);
void LerpAdopt(std::span<const float> global, std::span<float> local, float alpha);

}  // namespace diloco::kernels::ref
