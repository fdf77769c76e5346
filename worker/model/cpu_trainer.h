// The CPU trainer: the GPT of gpt.h in fp32 with OpenBLAS, AdamW from kernels/optim.h, on this
// worker's data shard; the Llama family's (llama/llama_trainer.h) when options.llama is set.
// params() is the live host parameter buffer in manifest order.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "worker/model/cpu_threads.h"  // SetCpuThreads: the trainer calls it with options.threads > 0
#include "worker/model/trainer_options.h"
#include "worker/trainer.h"

namespace diloco::model {

absl::StatusOr<std::unique_ptr<Trainer>> MakeCpuTrainer(const TrainerOptions& options);

}  // namespace diloco::model
