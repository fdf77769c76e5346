// diloco-worker's command line: its flags (worker_flags.cc; the plan flags are common's) and
// the options they make for the trainer, the learning-rate schedule and the sync client,
// checked before training starts. --device and --adopt parse into enums: a bad value fails at
// parse time naming the choices, and --help lists them.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/manifest.h"
#include "kernels/codec.h"
#include "worker/model/lr_schedule.h"
#include "worker/model/trainer_options.h"
#include "worker/sync_client.h"

namespace diloco::worker {

// Where the learner computes: the CPU, this node's CUDA GPUs, or nowhere (a synthetic learner
// that only waits and perturbs its parameters: worker/model/synthetic_trainer.h).
enum class Device { kCpu, kCuda, kSynthetic };

struct WorkerOptions {
  uint32_t worker_id = 0;
  Device device = Device::kCpu;
  model::TrainerOptions trainer;  // model, batch, AdamW, seeds, data, evaluation, threads, GPUs
  std::string model_spec;         // --model as given
  Manifest manifest;              // its tensors, whatever the source (common/model_source.h)
  model::LrSchedule lr_schedule;
  kernels::Codec codec;       // the push codec (auto: the first it may choose)
  uint32_t inner_steps = 50;  // H (auto: the smallest it may choose)
  // --codec, --inner_steps and what auto chooses from (worker/cadence.h); the sync client's
  // options take them from here.
  SyncOptions cadence;
  absl::Duration synthetic_step_time;  // --device=synthetic
  std::optional<SyncOptions> sync;     // empty --servers: train without sync
  int64_t steps = 0;                   // 0: until --duration or a signal
  int64_t start_step = 0;              // a restarted learner: where its schedule resumes
  std::string state_dir;               // where the step of the last applied push is kept
  int64_t state_every = 100;           // optimizer moments written every N steps (0: at the end)
  std::string resumed_data_position;   // --state_dir's: the data stream's position
  absl::Duration resumed_elapsed;      // --state_dir's: training time before this run
  absl::Duration duration;
  int64_t eval_every = 0;
  absl::Duration step_delay;
  double step_slowdown = 1;
  absl::Duration progress_interval;
  std::string metrics_jsonl, init_from, save_model;
  absl::Duration join_timeout, drain_timeout;
  bool train_unjoined = true;
  bool log_sync_events = false;

  // The synthetic learner has no model to evaluate: no held-out figures at all.
  bool evaluates() const { return device != Device::kSynthetic; }
  // --model is a preset or spec of a family the C++ trainer has (trainer.model is it), not a
  // model declared by its tensors.
  bool trains_family_model() const { return !trainer.model.family.empty(); }
  // The model as the logs and saved files name it: its family's config string, else --model.
  const std::string& model_name() const {
    return trains_family_model() ? trainer.model.config : model_spec;
  }
};

// The flags as options; an error names the flag and the cause.
absl::StatusOr<WorkerOptions> WorkerOptionsFromFlags();

// Parses diloco-worker's command line (usage errors exit 2; common/plan_flags.h).
void ParseWorkerFlags(int argc, char** argv);

bool AbslParseFlag(absl::string_view text, Device* v, std::string* error);
std::string AbslUnparseFlag(Device v);
bool AbslParseFlag(absl::string_view text, SyncOptions::Adopt* v, std::string* error);
std::string AbslUnparseFlag(SyncOptions::Adopt v);

}  // namespace diloco::worker
