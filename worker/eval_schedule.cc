#include "worker/eval_schedule.h"

namespace diloco::worker {

EvalSchedule::EvalSchedule(int64_t every, bool at_adoption)
    : every_(every), at_adoption_(at_adoption), due_(every) {}

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
