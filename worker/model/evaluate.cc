#include "worker/model/evaluate.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "worker/data/token_file.h"
#include "worker/model/heldout.h"
#include "worker/model/safetensors.h"

namespace diloco::model {

Evaluator::Evaluator(const TrainerOptions& o, std::unique_ptr<Gpt<float>> gpt, data::DataStreams d)
    : o_(o),
      gpt_(std::move(gpt)),
      data_(std::move(d)),
      heldout_(data_.heldout, o.batch_size, o.seq_len, 0) {}

namespace {

// Options resolved and the held-out stream only (no training tokens), checked to hold at least
// one sequence; shared by the evaluator and the oracle so both read the same tokens.
absl::StatusOr<std::pair<TrainerOptions, data::DataStreams>> LoadHeldout(
    const TrainerOptions& options) {
  absl::StatusOr<TrainerOptions> o = ResolveOptions(options);
  if (!o.ok()) return o.status();
  o->data.train_tokens = 0;
  absl::StatusOr<data::DataStreams> d = data::LoadData(o->data, o->model.vocab);
  if (!d.ok()) return d.status();
  if (d->heldout.size() <= size_t(o->seq_len))
    return absl::InvalidArgumentError(
        absl::StrCat("held-out data has ", d->heldout.size(), " tokens, need > ", o->seq_len));
  return std::make_pair(*std::move(o), *std::move(d));
}

}  // namespace

absl::StatusOr<std::unique_ptr<Evaluator>> Evaluator::Create(const TrainerOptions& options) {
  auto loaded = LoadHeldout(options);
  if (!loaded.ok()) return loaded.status();
  auto& [o, d] = *loaded;
  absl::StatusOr<std::unique_ptr<Gpt<float>>> gpt =
      Gpt<float>::Create(o.model, o.batch_size, o.seq_len);
  if (!gpt.ok()) return gpt.status();
  return std::unique_ptr<Evaluator>(new Evaluator(o, *std::move(gpt), std::move(d)));
}

absl::StatusOr<double> Evaluator::Evaluate(std::span<const float> params) {
  std::span<float> p = gpt_->params();
  if (params.size() != p.size())
    return absl::InvalidArgumentError(
        absl::StrCat("evaluate: ", params.size(), " parameters, the model has ", p.size()));
  std::copy(params.begin(), params.end(), p.begin());
  return HeldoutLoss(*gpt_, heldout_, o_.eval_batches);
}

absl::StatusOr<double> HeldoutOracle(const TrainerOptions& options) {
  if (options.data.kind != data::DataKind::kSynthetic)
    return absl::FailedPreconditionError("the exact entropy is known for synthetic data only");
  // The held-out tokens only, no model: a GPT-2-sized CPU model would allocate gigabytes of
  // activations to compute a number that needs none.
  auto loaded = LoadHeldout(options);
  if (!loaded.ok()) return loaded.status();
  const auto& [o, d] = *loaded;
  const data::Batcher heldout(d.heldout, o.batch_size, o.seq_len, 0);
  return HeldoutOracleLoss(d, heldout, o.eval_batches);
}

absl::StatusOr<double> SafetensorsLoss(const std::string& path, const std::string& bin_path,
                                       const GptConfig& config) {
  absl::StatusOr<ParamLayout> layout = MakeParamLayout(config);
  if (!layout.ok()) return layout.status();
  absl::StatusOr<std::vector<float>> params = ReadSafetensorsParams(path, layout->manifest);
  if (!params.ok()) return params.status();
  TrainerOptions o;
  o.model = config;
  o.data.kind = data::DataKind::kTokenFile;
  o.data.path = bin_path;
  o.data.heldout_path = bin_path;
  o.batch_size = 8;
  o.seq_len = config.context;
  absl::StatusOr<std::vector<uint16_t>> tokens = data::ReadTokenFile(bin_path, config.vocab);
  if (!tokens.ok()) return tokens.status();
  if (tokens->size() < 2)
    return absl::InvalidArgumentError(absl::StrCat(bin_path, ": need at least 2 tokens"));
  const int64_t per_batch = int64_t(o.batch_size) * o.seq_len;
  int64_t batches = (int64_t(tokens->size()) - 1) / per_batch;
  if (batches < 1) {
    o.batch_size = 1;
    o.seq_len = std::min<int64_t>(config.context, int64_t(tokens->size()) - 1);
    batches = 1;
  }
  o.eval_batches = static_cast<int>(std::min<int64_t>(batches, 64));
  absl::StatusOr<std::unique_ptr<Evaluator>> e = Evaluator::Create(o);
  if (!e.ok()) return e.status();
  return (*e)->Evaluate(*params);
}

absl::Status EvaluateSafetensors(const std::string& path, const std::string& bin_path,
                                 const GptConfig& config) {
  absl::StatusOr<double> loss = SafetensorsLoss(path, bin_path, config);
  if (!loss.ok()) return loss.status();
  std::printf("%s on %s: loss %.6f nats/token\n", path.c_str(), bin_path.c_str(), *loss);
  return absl::OkStatus();
}

}  // namespace diloco::model
