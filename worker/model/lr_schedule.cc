#include "worker/model/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "worker/model/trainer_options.h"

namespace diloco::model {
namespace {

bool Bounded(int64_t steps, absl::Duration duration) {
  return steps > 0 || duration != absl::InfiniteDuration();
}

}  // namespace

absl::StatusOr<LrSchedule> MakeLrSchedule(std::string_view name, float peak, int warmup_steps,
                                          float min_fraction, int64_t steps,
                                          absl::Duration duration, double cooldown) {
  LrSchedule s;
  if (name == "constant") {
    s.shape = LrSchedule::Shape::kConstant;
  } else if (name == "cosine" || name == "wsd") {
    if (!Bounded(steps, duration))
      return absl::InvalidArgumentError(absl::StrCat(
          "--lr_schedule=", std::string(name),
          " needs a bounded run (--steps or --duration): an endless run has no end to decay to"));
    s.shape = name == "cosine" ? LrSchedule::Shape::kCosine : LrSchedule::Shape::kWsd;
  } else if (name == "auto") {
    s.shape = Bounded(steps, duration) ? LrSchedule::Shape::kCosine : LrSchedule::Shape::kConstant;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("--lr_schedule=", std::string(name),
                                                   ": expected auto, constant, cosine or wsd"));
  }
  if (!(peak > 0) || !std::isfinite(peak))
    return absl::InvalidArgumentError(absl::StrCat("--lr=", peak, ": expected a rate > 0"));
  if (warmup_steps < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("--warmup_steps=", warmup_steps, ": expected >= 0"));
  if (!(min_fraction >= 0 && min_fraction <= 1))
    return absl::InvalidArgumentError(
        absl::StrCat("--min_lr_fraction=", min_fraction, ": expected a fraction in [0, 1]"));
  if (!(cooldown > 0 && cooldown <= 1))
    return absl::InvalidArgumentError(
        absl::StrCat("--lr_cooldown=", cooldown, ": expected a fraction in (0, 1]"));
  if (steps < 0)
    return absl::InvalidArgumentError(absl::StrCat("--steps=", steps, ": expected >= 0"));
  if (duration <= absl::ZeroDuration())
    return absl::InvalidArgumentError("--duration must be positive");
  s.peak = peak;
  s.warmup_steps = warmup_steps;
  s.min_fraction = min_fraction;
  s.steps = steps;
  s.duration = duration;
  s.cooldown = cooldown;
  return s;
}

float LrAt(const LrSchedule& s, int64_t step, absl::Duration elapsed) {
  if (s.warmup_steps > 0 && step <= s.warmup_steps)
    return s.peak * static_cast<float>(step) / static_cast<float>(s.warmup_steps);
  if (s.shape == LrSchedule::Shape::kConstant) return s.peak;
  double progress = 0;
  if (s.steps > 0) progress = static_cast<double>(step) / static_cast<double>(s.steps);
  if (s.duration != absl::InfiniteDuration())
    progress = std::max(progress, absl::FDivDuration(elapsed, s.duration));
  if (s.shape == LrSchedule::Shape::kCosine)
    return CosineLearningRate(s.peak, /*warmup_steps=*/0, s.min_fraction, step, progress);
  const double into = std::clamp((progress - (1 - s.cooldown)) / s.cooldown, 0.0, 1.0);
  return s.peak * static_cast<float>(1 - (1 - s.min_fraction) * into);
}

std::string Describe(const LrSchedule& s) {
  std::string out = absl::StrFormat("lr %g", s.peak);
  if (s.warmup_steps > 0) absl::StrAppend(&out, " warm-up ", s.warmup_steps, " steps");
  if (s.shape == LrSchedule::Shape::kConstant) return absl::StrCat(out, " constant");
  if (s.shape == LrSchedule::Shape::kCosine)
    absl::StrAppendFormat(&out, " cosine to %gx over", s.min_fraction);
  else
    absl::StrAppendFormat(&out, " wsd: linear to %gx over the last %g of", s.min_fraction,
                          s.cooldown);
  if (s.steps > 0) absl::StrAppend(&out, " ", s.steps, " steps");
  if (s.steps > 0 && s.duration != absl::InfiniteDuration()) absl::StrAppend(&out, " or");
  if (s.duration != absl::InfiniteDuration())
    absl::StrAppend(&out, " ", absl::FormatDuration(s.duration));
  return out;
}

}  // namespace diloco::model
