#include "worker/model/evaluate.h"

#include <algorithm>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/model_family.h"
#include "worker/data/token_file.h"
#include "worker/model/heldout.h"
#include "worker/model/safetensors.h"
#include "worker/model/trainer_family.h"

namespace diloco::model {

Evaluator::Evaluator(const TrainerOptions& o, std::unique_ptr<CpuModel> model, data::DataStreams d)
    : o_(o),
      model_(std::move(model)),
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
  absl::StatusOr<data::DataStreams> d = data::LoadData(o->data, Vocab(*o));
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
  absl::StatusOr<std::unique_ptr<CpuModel>> model =
      MakeCpuModel(o.model, o.batch_size, o.seq_len, /*training=*/false);
  if (!model.ok()) return model.status();
  return std::unique_ptr<Evaluator>(new Evaluator(o, *std::move(model), std::move(d)));
}

absl::Status Evaluator::Load(std::span<const float> params) {
  std::span<float> p = model_->params();
  if (params.size() != p.size())
    return absl::InvalidArgumentError(
        absl::StrCat("evaluate: ", params.size(), " parameters, the model has ", p.size()));
  std::copy(params.begin(), params.end(), p.begin());
  return absl::OkStatus();
}

absl::StatusOr<double> Evaluator::Evaluate(std::span<const float> params) {
  if (absl::Status s = Load(params); !s.ok()) return s;
  return HeldoutLoss(*model_, heldout_, o_.eval_batches);
}

absl::StatusOr<EvalResult> Evaluator::EvaluateInDetail(std::span<const float> params) {
  if (absl::Status s = Load(params); !s.ok()) return s;
  const HeldoutLosses l = HeldoutLossByChain(*model_, data_, heldout_, o_.eval_batches);
  EvalResult r;
  r.loss = l.loss;
  r.tokens = HeldoutTokens(heldout_, o_.eval_batches);
  r.entropy_floor = HeldoutOracleLoss(data_, heldout_, o_.eval_batches);
  r.chain_loss = l.chain_loss;
  for (const ChainShare& c : HeldoutOracleByChain(data_, heldout_, o_.eval_batches)) {
    r.chain_floor.push_back(c.entropy);
    r.chain_tokens.push_back(c.tokens);
  }
  return r;
}

int64_t HeldoutTokens(const TrainerOptions& o) {
  return int64_t(o.eval_batches) * o.batch_size * (o.seq_len > 0 ? o.seq_len : Context(o));
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

absl::StatusOr<EvalResult> EvaluateTokens(const TrainerModel& model, std::span<const float> params,
                                          std::span<const uint16_t> tokens, int64_t max_tokens,
                                          int batch, int seq_len) {
  const TrainerFamily* family = FindTrainerFamily(model.family);
  if (family == nullptr)
    return absl::InvalidArgumentError(absl::StrCat("evaluate: the C++ trainer has no family \"",
                                                   model.family, "\" (it has ",
                                                   TrainerFamilyNames(), ")"));
  if (seq_len == 0) seq_len = model.context;
  if (seq_len < 1 || seq_len > model.context)
    return absl::InvalidArgumentError(
        absl::StrCat("seq_len ", seq_len, " must be in [1, context ", model.context, "]"));
  if (batch < 0) return absl::InvalidArgumentError("batch must be >= 0");
  if (max_tokens < 0) return absl::InvalidArgumentError("the token count must be >= 0");
  if (tokens.size() < 2)
    return absl::InvalidArgumentError(
        absl::StrCat("need at least 2 tokens (one predicted), have ", tokens.size()));
  const int64_t available = int64_t(tokens.size()) - 1;  // every token but the first is a target
  if (max_tokens > available)
    return absl::InvalidArgumentError(absl::StrCat("asked for ", max_tokens,
                                                   " predicted tokens, the data has ", available,
                                                   " (", tokens.size(), " tokens)"));
  const int64_t n = max_tokens > 0 ? max_tokens : available;
  for (int64_t i = 0; i <= n; ++i)
    if (tokens[i] >= model.vocab)
      return absl::OutOfRangeError(absl::StrCat("token ", tokens[i], " at position ", i,
                                                " is not in the model's vocabulary of ",
                                                model.vocab));
  const int T = seq_len;
  const int64_t windows = (n + T - 1) / T;
  if (batch == 0) {
    const size_t per_window = std::max<size_t>(1, family->ForwardBytesPerSequence(model, seq_len));
    batch = static_cast<int>(std::clamp<size_t>((size_t{2} << 30) / per_window, 1, 8));
  }
  const int B = static_cast<int>(std::min<int64_t>(batch, windows));
  absl::StatusOr<std::unique_ptr<CpuModel>> m =
      family->MakeCpuModel(model, B, T, /*training=*/false);
  if (!m.ok()) return m.status();
  std::span<float> p = (*m)->params();
  if (params.size() != p.size())
    return absl::InvalidArgumentError(
        absl::StrCat("evaluate: ", params.size(), " parameters, the model has ", p.size()));
  std::copy(params.begin(), params.end(), p.begin());
  std::vector<int32_t> in(size_t(B) * T), tg(in.size());
  double sum = 0;
  for (int64_t w0 = 0; w0 < windows; w0 += B) {
    std::fill(in.begin(), in.end(), 0);
    std::fill(tg.begin(), tg.end(), 0);
    for (int b = 0; b < B && w0 + b < windows; ++b) {
      const int64_t start = (w0 + b) * T;
      const int len = static_cast<int>(std::min<int64_t>(T, n - start));
      for (int t = 0; t < len; ++t) {
        in[size_t(b) * T + t] = tokens[start + t];
        tg[size_t(b) * T + t] = tokens[start + t + 1];
      }
    }
    (*m)->Forward(in.data(), tg.data());
    const std::span<const float> losses = (*m)->losses();
    for (int b = 0; b < B && w0 + b < windows; ++b) {
      const int64_t start = (w0 + b) * T;
      const int len = static_cast<int>(std::min<int64_t>(T, n - start));
      for (int t = 0; t < len; ++t) sum += losses[size_t(b) * T + t];
    }
  }
  EvalResult r;
  r.loss = sum / double(n);
  r.tokens = n;
  return r;
}

namespace {

absl::StatusOr<EvalResult> EvaluateFiles(const std::string& path, const std::string& bin_path,
                                         const TrainerModel& model) {
  const ModelFamily* family = FindModelFamily(model.family);
  if (family == nullptr)
    return absl::InvalidArgumentError(absl::StrCat("no model family \"", model.family, "\""));
  absl::StatusOr<FamilyModel> m = family->Parse(model.config);
  if (!m.ok()) return m.status();
  absl::StatusOr<std::vector<float>> params = ReadSafetensorsParams(path, m->manifest);
  if (!params.ok()) return params.status();
  absl::StatusOr<std::vector<uint16_t>> tokens = data::ReadTokenFile(bin_path, model.vocab);
  if (!tokens.ok()) return tokens.status();
  return EvaluateTokens(model, *params, *tokens);
}

}  // namespace

absl::StatusOr<double> SafetensorsLoss(const std::string& path, const std::string& bin_path,
                                       const TrainerModel& model) {
  absl::StatusOr<EvalResult> r = EvaluateFiles(path, bin_path, model);
  if (!r.ok()) return r.status();
  return r->loss;
}

absl::Status EvaluateSafetensors(const std::string& path, const std::string& bin_path,
                                 const TrainerModel& model) {
  absl::StatusOr<EvalResult> r = EvaluateFiles(path, bin_path, model);
  if (!r.ok()) return r.status();
  std::printf("%s on %s: loss %.6f over %lld tokens\n", path.c_str(), bin_path.c_str(), r->loss,
              static_cast<long long>(r->tokens));
  return absl::OkStatus();
}

}  // namespace diloco::model
