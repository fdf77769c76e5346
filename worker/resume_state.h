// Where a learner's schedule resumes after a restart: the step of its last applied push,
// kept by the learner (rank 0 of an island) in a small file under --state_dir. A restarted
// learner, or an island restarted by its launcher after losing a rank, rejoins as a new
// generation and continues its learning-rate schedule and step count from there instead of
// from step 0 (--start_step, given by hand, wins).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace diloco::worker {

// DIR/worker-<id>.step
std::string ResumeStatePath(const std::string& dir, uint32_t worker_id);

// The step recorded for `worker_id`, nothing when there is no file; an error for a file that
// exists but does not hold one non-negative integer (a corrupt file is named, never ignored).
absl::StatusOr<std::optional<int64_t>> ReadResumeStep(const std::string& dir, uint32_t worker_id);

// Records `step` atomically (write, fsync, rename): a crash leaves the old value or the new.
absl::Status WriteResumeStep(const std::string& dir, uint32_t worker_id, int64_t step);

}  // namespace diloco::worker
