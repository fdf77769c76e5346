// Optimizer math on flat fp32 spans (fast CPU path; reference in kernels/reference.h).
//   Outer (server): Nesterov in PyTorch's SGD convention, one step per merged round:
//       m = mu*m + d;  theta -= lr*(d + mu*m)
//   Delayed Nesterov (per-arrival mode): see DelayedNesterov below.
//   Inner (worker): AdamW with decoupled weight decay; delta = anchor - local; lerp adoption.
#pragma once

#include <cstdint>
#include <span>

#include "kernels/optim_params.h"

namespace diloco::kernels {

void NesterovStep(const NesterovParams& p, std::span<float> theta, std::span<float> m,
                  std::span<const float> d);

// One AdamW step; `step` is 1-based (bias correction).
void AdamWStep(const AdamWParams& p, int64_t step, std::span<float> param,
               std::span<const float> grad, std::span<float> m, std::span<float> v);

// delta = anchor - local
void Delta(std::span<const float> anchor, std::span<const float> local, std::span<float> delta);

// local = global + alpha * (local - global)  (alpha = 0: take the global values).
void LerpAdopt(std::span<const float> global, std::span<float> local, float alpha);

// Adoption that keeps the inner steps the global values do not hold yet:
//   local += global - anchor + pushed_scale * pushed;  anchor = global
// where `pushed` is the delta (anchor - local at push time) the new global values include, or
// empty when they include none of this worker's work since `anchor`, and pushed_scale how far
// the local values were moved along it at the push (1: not moved; worker/training_sync.h,
// "Extrapolation"). So local ends as global + (local - local_at_push): nothing trained after the
// push is thrown away.
void RebaseAdopt(std::span<const float> global, std::span<float> anchor, std::span<float> local,
                 std::span<const float> pushed, float pushed_scale = 1.0f);

// y += a * x
void Axpy(float a, std::span<const float> x, std::span<float> y);

}  // namespace diloco::kernels
