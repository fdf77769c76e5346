// Evaluating parameters that are not (or not only) the trainer's own: a given flat parameter
// vector (e.g. the last adopted global model) or a safetensors file, on the held-out set.
#pragma once

#include <memory>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/data/batcher.h"
#include "worker/model/gpt.h"
#include "worker/model/trainer_options.h"

namespace diloco::model {

// Holds a model and the held-out batches of `options` (the same ones the trainer's EvalLoss
// uses), so repeated evaluations allocate nothing.
class Evaluator {
 public:
  static absl::StatusOr<std::unique_ptr<Evaluator>> Create(const TrainerOptions& options);
  // Mean held-out loss (nats per token) of a flat parameter vector in manifest order.
  absl::StatusOr<double> Evaluate(std::span<const float> params);
  const Manifest& manifest() const { return gpt_->layout().manifest; }

 private:
  Evaluator(const TrainerOptions& o, std::unique_ptr<Gpt<float>> gpt, data::DataStreams d);
  TrainerOptions o_;
  std::unique_ptr<Gpt<float>> gpt_;
  data::DataStreams data_;
  data::Batcher heldout_;
};

// The exact entropy (nats/token) of the held-out tokens EvalLoss evaluates, for synthetic data:
// the loss of an ideal model that knows which chain produced each token.
absl::StatusOr<double> HeldoutOracle(const TrainerOptions& options);

// Loads a safetensors file with the tensors of GptManifest(config) (F32, manifest names and
// shapes), evaluates it on the tokens of an llm.c .bin file (all of it, up to 64 batches of
// 8 x context) and prints "loss <nats/token> over <n> tokens" to stdout.
absl::Status EvaluateSafetensors(const std::string& path, const std::string& bin_path,
                                 const GptConfig& config);
// The same, returning the loss.
absl::StatusOr<double> SafetensorsLoss(const std::string& path, const std::string& bin_path,
                                       const GptConfig& config);

}  // namespace diloco::model
