// The trainer interface the sync client drives. A trainer owns the model's parameters as one
// flat fp32 buffer in manifest order (host memory for the CPU backend), trains on its local data
// shard, and reports held-out loss. The sync client reads and writes that buffer only between
// steps, on the training thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "common/manifest.h"

namespace diloco {

class Trainer {
 public:
  virtual ~Trainer() = default;
  virtual const Manifest& manifest() const = 0;
  // The flat parameter buffer (manifest order). Valid for the trainer's life.
  virtual std::span<float> params() = 0;
  // Elements [offset, offset + n) of that buffer, current, for reading and editing between
  // steps. A device trainer copies only this range to its host mirror (and back before the next
  // step), where params() would copy the whole model; the sync client works piece by piece
  // through this.
  virtual std::span<float> ParamRange(uint64_t offset, uint64_t n) {
    return params().subspan(offset, n);
  }
  // One inner step: forward, backward and AdamW on the next training batch. Returns the loss
  // (nats per token) of that batch.
  virtual float Step() = 0;
  // From the next Step() on, AdamW uses this learning rate instead of the options' own
  // schedule (a worker whose run is bounded by time schedules the rate by its clock).
  virtual void SetLearningRate(float lr) = 0;
  // Tokens consumed by one Step().
  virtual uint64_t tokens_per_step() const = 0;
  // Mean loss (nats per token) of the current parameters on the held-out set.
  virtual float EvalLoss() = 0;
  // Called by Step() between the backward pass and the optimizer with this step's gradients
  // (flat, manifest order) and its batch loss, both of which it may change in place: an island
  // averages them over its ranks (worker/island/), so that R ranks at batch B step as one
  // worker at batch R x B. A failure becomes error() and Step() returns NaN.
  using GradientReducer = std::function<absl::Status(std::span<float> grads, float& loss)>;
  // Unimplemented where the trainer has no such point (the CUDA trainer: its gradients live on
  // the devices; GPU islands across processes would reduce them with NCCL).
  virtual absl::Status SetGradientReducer(GradientReducer reducer) {
    return absl::UnimplementedError(
        "this trainer cannot average its gradients over an island's ranks (CPU trainer only)");
  }
  // What a learner that stops and continues keeps besides the parameters, which it takes from
  // the fleet when it rejoins (worker/resume_state.h, worker/optimizer_state.h). Where the
  // training data stands: "" for a trainer that draws none of its own.
  virtual std::string DataPosition() const { return ""; }
  virtual absl::Status SetDataPosition(std::string_view position) {
    return position.empty() ? absl::OkStatus()
                            : absl::FailedPreconditionError("this trainer has no data position");
  }
  // The optimizer's state: AdamW's step count and moments, flat in manifest order. Views into
  // the trainer, valid until the next Step(); nothing where the trainer does not keep them on
  // the host (the CUDA trainer: its moments live on the devices).
  struct OptimizerView {
    int64_t step = 0;
    std::span<const float> m, v;
  };
  virtual std::optional<OptimizerView> optimizer_state() const { return std::nullopt; }
  // Takes such a state back (sizes checked; on error nothing changes).
  virtual absl::Status RestoreOptimizer(int64_t step, std::span<const float> m,
                                        std::span<const float> v) {
    return absl::UnimplementedError("this trainer cannot restore an optimizer state");
  }
  // The first failure of Step(), EvalLoss() or params(), which return NaN or stale values from
  // then on (a device error on the CUDA backend; CUDA errors are sticky). OK while nothing
  // failed; the CPU backend cannot fail there.
  virtual absl::Status error() const { return absl::OkStatus(); }
};

}  // namespace diloco
