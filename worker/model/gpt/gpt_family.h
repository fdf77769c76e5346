// The GPT family's entry in the model-family registry (common/model_family.h): its presets and
// specs (gpt_config.h) and its Hugging Face GPT-2 layout (gpt_hf.h).
#pragma once

#include "common/model_family.h"

namespace diloco {

// The family named "gpt". It claims every spec no other family claims, so that a bad spec is
// described in GPT's terms, as it always was.
const ModelFamily& GptFamily();

}  // namespace diloco
