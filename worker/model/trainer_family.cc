#include "worker/model/trainer_family.h"

#include <array>

#include "absl/strings/str_cat.h"
#include "worker/model/gpt/gpt_trainer_family.h"
#include "worker/model/llama/llama_trainer_family.h"

namespace diloco::model {
namespace {

const std::array<const TrainerFamily*, 2>& All() {
  static const std::array<const TrainerFamily*, 2> all = {&GptTrainerFamily(),
                                                          &LlamaTrainerFamily()};
  return all;
}

}  // namespace

const TrainerFamily* FindTrainerFamily(std::string_view name) {
  for (const TrainerFamily* f : All())
    if (f->name() == name) return f;
  return nullptr;
}

std::string TrainerFamilyNames() {
  std::string out;
  for (const TrainerFamily* f : All())
    absl::StrAppend(&out, out.empty() ? "" : ", ", std::string(f->name()));
  return out;
}

absl::StatusOr<TrainerModel> ResolveTrainerModel(const std::string& family,
                                                 const std::string& config) {
  const TrainerFamily* f = FindTrainerFamily(family);
  if (f == nullptr)
    return absl::InvalidArgumentError(absl::StrCat("the C++ trainer has no model family \"", family,
                                                   "\" (it trains: ", TrainerFamilyNames(), ")"));
  return f->Model(config);
}

absl::StatusOr<std::unique_ptr<CpuModel>> MakeCpuModel(const TrainerModel& model, int batch,
                                                       int seq_len, bool training) {
  const TrainerFamily* f = FindTrainerFamily(model.family);
  if (f == nullptr)
    return absl::InvalidArgumentError(absl::StrCat("the C++ trainer has no model family \"",
                                                   model.family,
                                                   "\" (it trains: ", TrainerFamilyNames(), ")"));
  return f->MakeCpuModel(model, batch, seq_len, training);
}

}  // namespace diloco::model
