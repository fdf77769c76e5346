// Where a learner's schedule resumes after a restart: the step of its last applied push, the
// training time elapsed then and where its training data stood, kept by the learner (rank 0 of
// an island) in a small file under --state_dir, rewritten at each applied push. A restarted
// learner, or an island restarted by its launcher after losing a rank, rejoins as a new generation
// and continues its learning-rate schedule, step count and
// --duration clock from there instead of from zero (--start_step, given by hand, wins). The
// time between the loss and the restart is not counted: a run bounded by --duration ends that
// much later. The data stream continues from the recorded position, where it stood when the
// last applied push was seen acknowledged (a step or a few after the push left): no batch is
// drawn twice; the work of the steps after that point dies with the process. (The optimizer's
// moments are kept apart, less often: optimizer_state.h.)
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace diloco::worker {

// DIR/worker-<id>.step
std::string ResumeStatePath(const std::string& dir, uint32_t worker_id);

struct ResumePoint {
  int64_t step = 0;
  absl::Duration elapsed;     // training time at that step
  std::string data_position;  // Trainer::DataPosition() then; empty: not recorded
};

// The point recorded for `worker_id`, nothing when there is no file; an error for a file that
// exists but does not hold "STEP ELAPSED_SECONDS", optionally followed by a line
// "data POSITION" (a corrupt file is named, never ignored).
absl::StatusOr<std::optional<ResumePoint>> ReadResumePoint(const std::string& dir,
                                                           uint32_t worker_id);

// Records `point` atomically (write, fsync, rename): a crash leaves the old value or the new.
absl::Status WriteResumePoint(const std::string& dir, uint32_t worker_id, ResumePoint point);

}  // namespace diloco::worker
