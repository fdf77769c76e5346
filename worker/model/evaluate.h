// Evaluating parameters that are not (or not only) the trainer's own: a flat parameter vector
// (the last adopted global model, a safetensors file, the shards' stores) on the worker's
// held-out set, or on every token of a token file. Every result says how many predicted tokens
// it is over, so two figures can be checked to be on the same tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "worker/data/batcher.h"
#include "worker/model/cpu_model.h"
#include "worker/model/trainer_options.h"

namespace diloco::model {

struct EvalResult {
  double loss = 0;            // mean nats per predicted token
  int64_t tokens = 0;         // predicted (target) tokens evaluated
  double entropy_floor = -1;  // synthetic held-out set: an ideal chain-aware model's loss
  // Synthetic held-out set, per chain (empty otherwise): the model's loss, the floor, targets.
  std::vector<double> chain_loss, chain_floor;
  std::vector<int64_t> chain_tokens;
};

// Holds a forward-only model and the held-out batches of `options` (the same ones the trainer's
// EvalLoss uses: same tokens, same windows, same arithmetic), so repeated evaluations allocate
// nothing.
class Evaluator {
 public:
  static absl::StatusOr<std::unique_ptr<Evaluator>> Create(const TrainerOptions& options);
  // Mean held-out loss (nats per token) of a flat parameter vector in manifest order.
  absl::StatusOr<double> Evaluate(std::span<const float> params);
  // The same loss with the token count and, for synthetic data, the floor and the per-chain
  // figures.
  absl::StatusOr<EvalResult> EvaluateInDetail(std::span<const float> params);
  const Manifest& manifest() const { return model_->manifest(); }

 private:
  Evaluator(const TrainerOptions& o, std::unique_ptr<CpuModel> model, data::DataStreams d);
  absl::Status Load(std::span<const float> params);
  TrainerOptions o_;
  std::unique_ptr<CpuModel> model_;
  data::DataStreams data_;
  data::Batcher heldout_;
};

// The held-out targets the trainers evaluate with `options`: eval_batches * batch_size *
// seq_len (seq_len 0: the model's context).
int64_t HeldoutTokens(const TrainerOptions& options);

// The exact entropy (nats/token) of the held-out tokens EvalLoss evaluates, for synthetic data:
// the loss of an ideal model that knows which chain produced each token.
absl::StatusOr<double> HeldoutOracle(const TrainerOptions& options);

// Mean loss of `params` (`model`'s manifest order) over the first `max_tokens` predicted tokens
// of `tokens` (0: all of them, tokens.size() - 1), read as consecutive non-overlapping windows
// of seq_len (0: the context) targets, `batch` windows per forward pass: memory is one
// forward-only (batch, seq_len) model whatever the number of tokens (batch 0: as many windows
// as fit in 2 GiB of activations, at most 8; GPT-2 124M at 1024 tokens takes 1.7 GB a window).
// Every family the C++ trainer has (trainer_family.h).
// The loss does not depend on the batch. A last, shorter window is evaluated too (attention is
// causal: the padding after it changes nothing).
absl::StatusOr<EvalResult> EvaluateTokens(const TrainerModel& model, std::span<const float> params,
                                          std::span<const uint16_t> tokens, int64_t max_tokens = 0,
                                          int batch = 0, int seq_len = 0);

// Loads a safetensors file with the tensors of `model`'s manifest (F32, manifest names and
// shapes), evaluates it on every token of an llm.c .bin file (EvaluateTokens) and prints
// "<path> on <bin>: loss <nats/token> over <n> tokens" to stdout.
absl::Status EvaluateSafetensors(const std::string& path, const std::string& bin_path,
                                 const TrainerModel& model);
// The same, returning the loss.
absl::StatusOr<double> SafetensorsLoss(const std::string& path, const std::string& bin_path,
                                       const TrainerModel& model);

}  // namespace diloco::model
