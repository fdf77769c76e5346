// The CPU trainer: the GPT of gpt.h in fp32 with OpenBLAS, AdamW from kernels/optim.h, on this
// worker's data shard. params() is the live host parameter buffer in manifest order.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "worker/model/trainer_options.h"
#include "worker/trainer.h"

namespace diloco::model {

absl::StatusOr<std::unique_ptr<Trainer>> MakeCpuTrainer(const TrainerOptions& options);

// Sets OpenBLAS's thread count for the whole process (n >= 1); the CPU trainer calls it with
// options.threads when that is > 0.
void SetCpuThreads(int n);

}  // namespace diloco::model
