// The trainer's half of a model family: what the C++ trainer and the evaluators need of a family
// beyond its manifest (common/model_family.h, which shards and storage read). A family gives its
// model's vocabulary and context for a canonical config string, and builds its CPU network
// (cpu_model.h). Nothing outside a family's folder names its configuration type: the trainer
// options carry a TrainerModel (family name and config string), and FindTrainerFamily finds the
// family that reads it. A new family: its folder, and one line in trainer_family.cc.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "worker/model/cpu_model.h"

namespace diloco::model {

// The model a trainer trains: its family's name and canonical config string (ModelSource's
// family and config), with the two sizes the data and the evaluation need.
struct TrainerModel {
  std::string family;
  std::string config;
  int vocab = 0;
  int context = 0;
};

class TrainerFamily {
 public:
  virtual ~TrainerFamily() = default;
  virtual std::string_view name() const = 0;
  // `config` read back into the model it names (errors name the config).
  virtual absl::StatusOr<TrainerModel> Model(const std::string& config) const = 0;
  // The CPU network of `model` for (batch, seq_len); training = false: forward only (no
  // gradient buffers).
  virtual absl::StatusOr<std::unique_ptr<CpuModel>> MakeCpuModel(const TrainerModel& model,
                                                                 int batch, int seq_len,
                                                                 bool training) const = 0;
  // Bytes of activations a forward-only model of `model` allocates for one sequence of
  // seq_len: how the evaluators size their batches to the memory.
  virtual size_t ForwardBytesPerSequence(const TrainerModel& model, int seq_len) const = 0;
};

// The family named `name`, or null.
const TrainerFamily* FindTrainerFamily(std::string_view name);
// The families the C++ trainer trains, by name, for refusals ("gpt, llama").
std::string TrainerFamilyNames();

// `family`'s model of `config` (an error naming the family when the C++ trainer has none).
absl::StatusOr<TrainerModel> ResolveTrainerModel(const std::string& family,
                                                 const std::string& config);
// The CPU network of `model` (its family looked up; errors as above).
absl::StatusOr<std::unique_ptr<CpuModel>> MakeCpuModel(const TrainerModel& model, int batch,
                                                       int seq_len, bool training = true);

}  // namespace diloco::model
