#include "worker/model/trainer_options.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace diloco::model {

float CosineLearningRate(float peak, int warmup_steps, float min_fraction, int64_t step,
                         double progress) {
  if (warmup_steps > 0 && step <= warmup_steps)
    return peak * static_cast<float>(step) / static_cast<float>(warmup_steps);
  const double p = std::clamp(progress, 0.0, 1.0);
  const float min_lr = peak * min_fraction;
  return min_lr + (peak - min_lr) * static_cast<float>(0.5 * (1.0 + std::cos(M_PI * p)));
}

float LearningRate(const TrainerOptions& o, int64_t step) {
  if (o.decay_steps <= o.warmup_steps)  // constant after the warm-up
    return o.warmup_steps > 0 && step <= o.warmup_steps
               ? o.adamw.lr * static_cast<float>(step) / static_cast<float>(o.warmup_steps)
               : o.adamw.lr;
  const double frac = double(step - o.warmup_steps) / double(o.decay_steps - o.warmup_steps);
  return CosineLearningRate(o.adamw.lr, o.warmup_steps, o.min_lr_fraction, step, frac);
}

absl::StatusOr<TrainerOptions> ResolveOptions(const TrainerOptions& options) {
  TrainerOptions o = options;
  if (o.model.family.empty() || o.model.vocab < 1 || o.model.context < 1)
    return absl::InvalidArgumentError(
        absl::StrCat("no model to train (family \"", o.model.family, "\", vocab ", o.model.vocab,
                     ", context ", o.model.context, "): set TrainerOptions::model"));
  if (o.seq_len == 0) o.seq_len = Context(o);
  if (o.seq_len < 1 || o.seq_len > Context(o))
    return absl::InvalidArgumentError(
        absl::StrCat("seq_len ", o.seq_len, " must be in [1, context ", Context(o), "]"));
  if (o.batch_size < 1) return absl::InvalidArgumentError("batch_size must be >= 1");
  if (o.eval_batches < 1) return absl::InvalidArgumentError("eval_batches must be >= 1");
  if (o.gpus < 1) return absl::InvalidArgumentError("gpus must be >= 1");
  if (!(o.adamw.lr > 0)) return absl::InvalidArgumentError("learning rate must be > 0");
  if (o.grad_clip < 0) return absl::InvalidArgumentError("grad_clip must be >= 0");
  if (o.data_slices < 1 || o.data_slice < 0 || o.data_slice >= o.data_slices)
    return absl::InvalidArgumentError(
        absl::StrCat("data slice ", o.data_slice, " of ", o.data_slices, ": outside [0, slices)"));
  return o;
}

}  // namespace diloco::model
