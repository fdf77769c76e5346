// diloco-ctl export of any model other than the built-in GPT (--model=hf:DIR, safetensors:PATH,
// manifest:PATH): the global model the stores hold, under the tensors' own names, so the
// module that declared them loads it back with a strict load_state_dict.
//
//   --format=safetensors  one file: every manifest tensor, F32, named and shaped as the source
//                         declared it, in the manifest's order.
//   --format=hf           a Hugging Face folder that opens where the source folder opened
//                         (--model=hf:DIR only): OUT/model.safetensors as above (with
//                         "format": "pt", which transformers requires) and the source's
//                         config.json, byte for byte, with the files beside it that describe the
//                         model rather than hold its weights (kHfCarriedFiles: generation config,
//                         tokenizer), where present. Weights are always one file: a sharded
//                         source comes out as one model.safetensors, which from_pretrained reads
//                         as readily as an index.
//
// Values are fp32 whatever the source's dtype: the stores hold fp32, and the outer optimizer's
// updates are often finer than a BF16 source's rounding step, which narrowing would undo; any
// loader narrows on load (from_pretrained(torch_dtype=...); config.json keeps the source's
// torch_dtype, so torch_dtype="auto" gives the model the source's dtype).
//
// Tied weights as the source has them: a Hugging Face checkpoint saves a tied head once (no
// lm_head.weight) and so does the export; a source that names one tensor twice over the same
// bytes gets both names back over the same bytes (the first-listed name first, so the export,
// read as a model source, declares the very tensors the stores serve).
//
// Nothing is written until everything is read and checked: the stores (by the caller), the
// source folder's config.json and carried files. The export never writes into the source
// folder, nor into a folder that holds a sharded index (its stale shards would sit beside the
// new weights). Each file is written atomically.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "storage/model_export.h"

namespace diloco::ctl {

// The files of a Hugging Face folder an hf export copies, when the source has them (config.json
// is required; the others are optional).
inline constexpr const char* kHfCarriedFiles[] = {"config.json",
                                                  "generation_config.json",
                                                  "tokenizer.json",
                                                  "tokenizer_config.json",
                                                  "special_tokens_map.json",
                                                  "tokenizer.model",
                                                  "vocab.json",
                                                  "merges.txt",
                                                  "added_tokens.json",
                                                  "chat_template.jinja"};

// Writes `m` (AssembleModel of `model_spec`) to `out`: a file, or with `hf_folder` a folder
// (model_spec must then be hf:DIR). Errors name the file or folder and the cause.
absl::Status WriteAnyModelExport(const std::string& model_spec, bool hf_folder,
                                 const std::string& out, const storage::AssembledModel& m);

}  // namespace diloco::ctl
