// diloco-worker as one rank of an island (worker/island/): what worker_main.cc does beyond a
// lone learner's run. Rank 0 is the learner the shards see; the other ranks train their slice
// of the batch, average gradients with it every step and follow its orders (island_steps.h).
#pragma once

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "worker/island/island.h"
#include "worker/island/island_spec.h"
#include "worker/island/island_steps.h"
#include "worker/trainer.h"
#include "worker/worker_flags.h"

namespace diloco::worker {

// This process's island from the flags and the environment. For a rank of an island of
// several, adapts `w`: its slice of the batch; for ranks other than 0 no sync client (rank 0
// speaks for the island), no evaluation or saved model, and the event file --metrics_jsonl
// with ".rank<r>" appended (the ranks may share a directory). A --device=cuda rank trains on
// one GPU (--gpus=1), the one of its local rank (IslandSpec::local_rank), made the current
// device here so that the trainer is created on it. Refused, changing nothing: another device
// (synthetic), --gpus other than 1, no GPU at the local rank's index, no NCCL.
absl::StatusOr<island::IslandSpec> PrepareIsland(WorkerOptions& w);

struct IslandRun {
  std::unique_ptr<island::Island> island;
  std::unique_ptr<island::IslandSteps> steps;
  bool leader() const { return island == nullptr || island->rank() == 0; }
};

// The rendezvous (every rank's model and settings, the device among them, compared with rank
// 0's) and the trainer's gradients averaged over the ranks from its next step on: over gloo for
// CPU ranks (Trainer::SetGradientReducer), over NCCL for CUDA ranks (rank 0's unique id through
// the rendezvous store, then worker/model/cuda/nccl_ranks.h). Empty for an island of one.
absl::StatusOr<IslandRun> JoinIsland(const island::IslandSpec& spec, const WorkerOptions& w,
                                     Trainer& trainer);

}  // namespace diloco::worker
