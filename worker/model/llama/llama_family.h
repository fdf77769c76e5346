// The Llama family's entry in the model-family registry (common/model_family.h): its presets
// and specs (llama_config.h) and its Hugging Face layout (llama_hf.h).
#pragma once

#include "common/model_family.h"

namespace diloco {

// The family named "llama"; it claims the specs that start with "llama".
const ModelFamily& LlamaFamily();

}  // namespace diloco
