// The Llama family's CPU trainer: llama_model.h in fp32, AdamW from kernels/optim.h (decay on
// matrices only), global-norm clipping, this worker's data shard; the same contract as the
// GPT's CPU trainer (../cpu_trainer.h), which hands it TrainerOptions::llama.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "worker/model/trainer_options.h"
#include "worker/trainer.h"

namespace diloco::model {

// options.llama must be set.
absl::StatusOr<std::unique_ptr<Trainer>> MakeLlamaCpuTrainer(const TrainerOptions& options);

}  // namespace diloco::model
