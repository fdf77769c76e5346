// The learning-rate schedule of one worker's whole run. A run is bounded by inner steps
// (--steps), by time (--duration), by both (whichever comes first) or by neither (until a
// signal). Cosine decay follows the run's progress, the larger of steps / --steps and
// elapsed / --duration, so a fleet whose workers all stop at one time decays together whatever
// their speeds, and the last rounds' deltas are small: the global model the run ends on is a
// settled one, not a point of a constant-rate oscillation. Cosine decays over the whole run;
// wsd (warm-up, stable, decay) holds the peak and decays linearly over the last `cooldown` of
// the run only. A run with no bound cannot decay and keeps a constant rate.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace diloco::model {

struct LrSchedule {
  enum class Shape { kConstant, kCosine, kWsd };
  Shape shape = Shape::kConstant;
  float peak = 1e-3f;
  int warmup_steps = 0;       // linear warm-up from peak / warmup_steps over these steps
  float min_fraction = 0.1f;  // the floor: min_fraction * peak at the end of the run
  double cooldown = 0.2;      // wsd: the fraction of the run over which the rate decays
  int64_t steps = 0;          // the run's bound in inner steps (0: none)
  absl::Duration duration = absl::InfiniteDuration();  // the run's bound in time
};

// `name` is auto (cosine when the run is bounded, constant otherwise), constant, cosine or wsd
// (the last two an error for an unbounded run, which has no end to decay to). Checks every
// field.
absl::StatusOr<LrSchedule> MakeLrSchedule(std::string_view name, float peak, int warmup_steps,
                                          float min_fraction, int64_t steps,
                                          absl::Duration duration, double cooldown = 0.2);

// The rate of 1-based inner step `step`, begun `elapsed` after the start of the run.
float LrAt(const LrSchedule& s, int64_t step, absl::Duration elapsed);

// One line for the worker's start-up message, e.g. "lr 0.003 cosine to 0.1x over 1500 steps".
std::string Describe(const LrSchedule& s);

}  // namespace diloco::model
