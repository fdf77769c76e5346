// diloco-worker's run: the training loop (the learning rate of the schedule, a step, the sync
// client's turn, the --state_dir record, evaluations and progress lines), then the drain, the
// island's last check, --save_model and the "done" report. It takes the parts main built
// (run_setup.h) in RunParts, so that main stays the wiring of flags to parts.
#pragma once

#include "common/event_log.h"
#include "worker/island/island_spec.h"
#include "worker/island_run.h"
#include "worker/run_setup.h"
#include "worker/state_keeper.h"
#include "worker/sync_client.h"
#include "worker/trainer.h"
#include "worker/worker_flags.h"

namespace diloco::worker {

struct RunParts {
  const WorkerOptions& options;
  const island::IslandSpec& spec;  // this rank of its island (one of one without --island)
  Trainer& trainer;
  EventLog& log;
  SyncClient* sync;        // null without --servers
  IslandRun& island_run;   // its steps are null without --island
  StateKeeper& keeper;     // --state_dir
  const Baseline& before;  // the held-out figures before training
  // The "joined" event was written already (or is not wanted): a background join writes none.
  bool joined_logged;
};

// Trains until --steps, --duration or a stop signal (run_setup.h), then drains and reports.
// Returns the process's exit code: 0, or 2 after saying why on stderr.
int RunTraining(const RunParts& parts);

}  // namespace diloco::worker
