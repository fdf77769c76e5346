// The optimizer's state of a learner that stops and continues: AdamW's step count and moments
// (8 bytes per parameter), written by the learner (rank 0 of an island) every --state_every
// inner steps and at a clean stop to DIR/worker-<id>.adamw under --state_dir, and taken back at
// a restart. The parameters are not in it: a restarted learner adopts the fleet's. Written apart
// from the small resume point (resume_state.h, at every applied push) because it is large; so a
// restart may take moments some steps older than its schedule's step, which AdamW's moving
// averages absorb, where zeroed moments would restart its bias correction and its step sizes.
//
// File: "DLADAMW1", worker id (u32), 0 (u32), manifest fingerprint (u64), parameters n (u64), the
// schedule's step at the write (i64), AdamW's step (i64), m[n], v[n] (f32), then the XXH3-64 of
// everything before it. Little-endian, as the machines it runs on.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/manifest.h"
#include "worker/trainer.h"

namespace diloco::worker {

std::string OptimizerStatePath(const std::string& dir, uint32_t worker_id);

// Writes the trainer's optimizer state atomically (a crash leaves the old file or the new).
// FailedPrecondition when the trainer keeps none on the host.
absl::Status WriteOptimizerState(const std::string& dir, uint32_t worker_id, int64_t step,
                                 const Trainer& trainer);

// Restores the state recorded for `worker_id` into the trainer and returns the schedule's step
// it was written at; nothing when there is no file. A file of another worker or model, cut
// short or damaged is an error naming the file and the difference, and changes nothing.
absl::StatusOr<std::optional<int64_t>> RestoreOptimizerState(const std::string& dir,
                                                             uint32_t worker_id, Trainer& trainer);

}  // namespace diloco::worker
