// The CPU trainer, one for every model family: the family's network (cpu_model.h, found by
// options.model's family: trainer_family.h) in fp32 with OpenBLAS, global-norm clipping, AdamW
// from kernels/optim.h (decay on matrices and embeddings only), on this worker's data shard.
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
