// The Llama family's half for the C++ trainer (../trainer_family.h): its CPU network
// (llama_model.h) behind CpuModel, trained by the family-neutral CPU trainer (../cpu_trainer.h).
// The family has no CUDA kernels: the CUDA trainer refuses it by name.
#pragma once

#include "worker/model/llama/llama_config.h"
#include "worker/model/trainer_family.h"

namespace diloco::model {

const TrainerFamily& LlamaTrainerFamily();

// The TrainerModel of `config` ("llama", its canonical config string, vocab and context).
TrainerModel LlamaTrainerModel(const LlamaConfig& config);

}  // namespace diloco::model
