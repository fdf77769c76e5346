// What diloco-worker keeps under --state_dir so that a learner that stops and continues picks
// up where it was: the resume point (step, clock, data position) at every applied push
// (resume_state.h) and the optimizer's moments every --state_every steps and at a clean stop
// (optimizer_state.h). Rank 0 of an island writes (its ranks share one data stream and, their
// gradients averaged, one optimizer state); every rank restores.
#pragma once

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "worker/trainer.h"

namespace diloco::worker {

struct WorkerOptions;

class StateKeeper {
 public:
  // Nothing is kept or restored when options.state_dir is empty; rank > 0 only restores.
  StateKeeper(const WorkerOptions& options, int rank);

  // At start, before the first step: makes the directory (rank 0), then the data position and the
  // optimizer's moments the last run recorded, into the trainer. Returns a line for the log (""
  // when nothing was resumed). A recorded state that does not fit this learner is an error and
  // changes nothing.
  absl::StatusOr<std::string> Restore(Trainer& trainer);

  // After step `step` (the schedule's, counted from 1) with `applied` pushes applied so far
  // and `elapsed` of training: records what is due. Failures are reported, not fatal (the run
  // goes on; a restart would resume from an older record).
  absl::Status AfterStep(const Trainer& trainer, int64_t step, uint64_t applied,
                         absl::Duration elapsed);
  // At a clean stop: the optimizer's moments as they end.
  absl::Status Finish(const Trainer& trainer, int64_t step);

 private:
  const std::string dir_;
  const uint32_t worker_id_;
  const int64_t every_;
  const bool writes_;
  const std::string data_position_;  // the resumed one
  uint64_t applied_recorded_ = 0;
  bool optimizer_kept_ = true;  // false once the trainer said it keeps none on the host
};

}  // namespace diloco::worker
