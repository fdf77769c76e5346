#include "worker/eval_schedule.h"

#include <algorithm>

namespace diloco::worker {

EvalSchedule::EvalSchedule(int64_t every, bool at_adoption, int64_t first)
    : every_(every),
      at_adoption_(at_adoption),
      due_(every > 0 ? (std::max<int64_t>(first, 1) + every - 1) / every * every : 0) {}

bool EvalSchedule::Watching(int64_t step) const {
  return every_ > 0 && at_adoption_ && step >= due_ - 1;
}

bool EvalSchedule::Now(int64_t step, uint64_t version0) {
  if (every_ <= 0) return false;
  bool now = step >= due_;
  if (Watching(step)) {  // from the step before the due one: a version adopted on this step
    now = now && (version0 != version0_ || step >= due_ + every_);
    version0_ = version0;
  }
  if (now) due_ = step / every_ * every_ + every_;
  return now;
}

}  // namespace diloco::worker
