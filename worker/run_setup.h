// The parts diloco-worker builds before its run loop (run_loop.h): the trainer of --device, the
// sync client joined to --servers, the stop signals, and the evaluation before training that
// the banner and the final report compare against. Apart from main so that main only reads the
// flags and wires these together.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "common/event_log.h"
#include "worker/island/island_spec.h"
#include "worker/sync_client.h"
#include "worker/trainer.h"
#include "worker/worker_flags.h"

namespace diloco::worker {

// SIGINT and SIGTERM end the run (and a lockstep wait) at the next step; StopRequested says
// whether one came.
void CatchStopSignals();
bool StopRequested();

// The trainer of --device: CPU, CUDA (when built with it and the GPUs are there) or synthetic.
absl::StatusOr<std::unique_ptr<Trainer>> MakeTrainer(const WorkerOptions& w);

// The sync client of --servers, joined: theta(0) and every fragment pulled before training
// (or, with --train_unjoined, still joining in the background after --join_timeout). An error
// when it cannot be made or the join fails; a refused model names the first differing tensor
// where this can.
absl::StatusOr<std::unique_ptr<SyncClient>> JoinFleet(const WorkerOptions& w, Trainer& tr,
                                                      std::optional<uint64_t> init_checksum,
                                                      EventLog& log);

// The held-out figures before training (rank 0 of an evaluating learner only) and the line
// the banner says about them.
struct Baseline {
  bool evaluates = false;
  float eval0 = 0;
  double oracle = -1;  // the entropy floor of synthetic data; < 0: none
  int64_t heldout_tokens = 0;
  std::string floor_str;  // " (entropy floor ...)" or ""
  std::string eval_str;
};
Baseline EvaluateBaseline(const WorkerOptions& w, const island::IslandSpec& spec, Trainer& tr);

}  // namespace diloco::worker
