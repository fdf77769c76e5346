// When diloco-worker's periodic evaluation (--eval_every) runs. A lone or lockstep worker
// evaluates at every multiple of the period. An aligned asynchronous worker (worker/
// training_sync.h, "Alignment") evaluates at the first step, from the one due, that adopted a new
// version of fragment 0: the fleet's workers adopt a round's version together, so they all stop
// for their evaluations at once and stay aligned. Evaluated at each one's own multiple of the
// period, every worker stopped in a different round and the others waited for it
// (benchmarks/quality/RESULTS.md, "Aligned pushes"). Without such an adoption (the shards away)
// an evaluation waits at most one period.
#pragma once

#include <cstdint>

namespace diloco::worker {

class EvalSchedule {
 public:
  // `every` steps (0: never); `at_adoption`: wait for fragment 0's next version as above. The
  // first step is `first` (a resumed worker's start step + 1): the first evaluation is due at
  // the first multiple of `every` from there.
  EvalSchedule(int64_t every, bool at_adoption, int64_t first = 1);

  // Whether Now needs fragment 0's adopted version after step `step` (so the caller reads it
  // only on the steps around an evaluation).
  bool Watching(int64_t step) const;
  // After step `step` (counted from 1), `version0` the version of fragment 0 adopted so far
  // (read when Watching, else ignored): true when the evaluation runs now.
  bool Now(int64_t step, uint64_t version0);

 private:
  const int64_t every_;
  const bool at_adoption_;
  int64_t due_;            // the step the next evaluation is due at
  uint64_t version0_ = 0;  // fragment 0's version after the last step watched
};

}  // namespace diloco::worker
