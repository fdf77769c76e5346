// The GPT family's half for the C++ trainer (../trainer_family.h): its CPU network (../gpt.h)
// behind CpuModel, and the TrainerModel of a GptConfig for code that builds one by hand (the
// presets, tests, benchmarks).
#pragma once

#include "worker/model/gpt/gpt_config.h"
#include "worker/model/trainer_family.h"

namespace diloco::model {

const TrainerFamily& GptTrainerFamily();

// The TrainerModel of `config` ("gpt", its canonical config string, vocab and context).
TrainerModel GptTrainerModel(const GptConfig& config);

// The GptConfig a TrainerModel of the GPT family names; an error for another family's (what
// the GPT-only code paths, the CUDA trainer among them, refuse with).
absl::StatusOr<GptConfig> GptConfigOf(const TrainerModel& model, std::string_view who);

}  // namespace diloco::model
