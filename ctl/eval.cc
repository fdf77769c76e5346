// diloco-ctl eval: the held-out loss of a model, from a safetensors file (an export, a worker's
// --save_model) or straight from the shards' stores (the global model they hold, no file), on
// every token of a token file (or its first N predicted tokens), or on exactly the worker's
// default synthetic held-out set (same tokens, windows and arithmetic as diloco-worker's own
// figure, with the entropy floor and the per-chain figures). Always prints the token count.
#include <cstdio>
#include <optional>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/plan_flags.h"
#include "ctl/commands.h"
#include "storage/model_export.h"
#include "worker/data/source.h"
#include "worker/data/token_file.h"
#include "worker/model/evaluate.h"
#include "worker/model/safetensors.h"
#include "worker/model/trainer_family.h"

ABSL_FLAG(std::string, params, "",
          "eval: the model's .safetensors file (an export, diloco-worker --save_model); without "
          "it, the global model in the store directories given as arguments");
ABSL_FLAG(std::string, data, "",
          "eval: FILE.bin (or bin:FILE, text:FILE), or synthetic: diloco-worker's default "
          "held-out set");
ABSL_FLAG(std::optional<int>, batch, std::nullopt,
          "eval: windows per forward pass (default: for a file, as many as fit in 2 GiB of "
          "activations, at most 8; for --data=synthetic, 8 as diloco-worker)");
ABSL_FLAG(int, seq_len, 0, "eval: the window length (0: the model's context)");
ABSL_FLAG(std::optional<int>, eval_batches, std::nullopt,
          "eval --data=synthetic: held-out batches (default: 4 as diloco-worker)");

namespace diloco::ctl {

int Eval(const Args& stores) {
  const std::string params_file = absl::GetFlag(FLAGS_params);
  const std::string data_spec = absl::GetFlag(FLAGS_data);
  const bool from_file = !params_file.empty();
  if (!FlagGiven("model") || data_spec.empty() || from_file == !stores.empty())
    return Usage(
        "eval needs --model, --data=FILE.bin|synthetic and either --params=FILE.safetensors or "
        "--fragments=P --shards=S STORE_DIR...");
  const std::optional<int64_t> tokens_flag = absl::GetFlag(FLAGS_tokens);
  const std::optional<int> batch_flag = absl::GetFlag(FLAGS_batch);
  const int64_t tokens = tokens_flag.value_or(0);
  const int batch = batch_flag.value_or(8), seq_len = absl::GetFlag(FLAGS_seq_len);
  const int eval_batches = absl::GetFlag(FLAGS_eval_batches).value_or(4);  // the worker's
  if (tokens < 0 || batch < 1 || seq_len < 0 || eval_batches < 1)
    return Usage(
        "--tokens and --seq_len must be integers >= 0, --batch and --eval_batches integers >= 1");
  const bool synthetic = data_spec == "synthetic";
  if (synthetic && tokens_flag)
    return Usage(
        "--tokens applies to a token file; --data=synthetic is the worker's held-out "
        "set (size it with --batch, --seq_len, --eval_batches)");
  if (!synthetic && absl::GetFlag(FLAGS_eval_batches))
    return Usage("--eval_batches applies to --data=synthetic only");
  auto trainable = TrainableModelFromFlags("eval");
  if (!trainable.ok()) return Fail(trainable.status());
  auto trained = model::ResolveTrainerModel(trainable->family, trainable->config);
  if (!trained.ok()) return Fail(trained.status());

  // The parameters, in manifest order.
  std::vector<float> params;
  std::string source;
  if (from_file) {
    auto p = model::ReadSafetensorsParams(params_file, trainable->manifest);
    if (!p.ok()) return Fail(p.status());
    params = *std::move(p);
    source = params_file;
  } else {
    if (!FlagGiven("fragments") || !FlagGiven("shards") || absl::GetFlag(FLAGS_fragments) == 0 ||
        absl::GetFlag(FLAGS_shards) == 0)
      return Usage("evaluating stores needs --fragments and --shards (positive integers)");
    auto plan = PlanFromFlags();
    if (!plan.ok()) return Fail(plan.status());
    storage::ExportRequest req;
    req.model_spec = plan->model_spec;
    req.num_fragments = plan->num_fragments;
    req.num_shards = plan->num_shards;
    req.stores = stores;
    auto m = storage::AssembleModel(req);
    if (!m.ok()) return Fail(m.status());
    params = std::move(m->params);
    source = absl::StrCat("stores ", absl::StrJoin(stores, ","), " (fragment versions ",
                          absl::StrJoin(m->summary.fragment_versions, ","), ")");
  }

  if (synthetic) {
    model::TrainerOptions o;  // what diloco-worker evaluates with its default --data=synthetic
    o.model = *trained;
    o.batch_size = batch;
    o.seq_len = seq_len;
    o.eval_batches = eval_batches;
    o.data = data::DataOptions{};
    auto e = model::Evaluator::Create(o);
    if (!e.ok()) return Fail(e.status());
    auto r = (*e)->EvaluateInDetail(params);
    if (!r.ok()) return Fail(r.status());
    std::printf(
        "%s on the synthetic held-out set: loss %.6f over %lld tokens (entropy floor %.6f)\n",
        source.c_str(), r->loss, static_cast<long long>(r->tokens), r->entropy_floor);
    for (size_t k = 0; k < r->chain_loss.size(); ++k)
      std::printf("  chain %zu: loss %.6f over %lld tokens (entropy floor %.6f)\n", k,
                  r->chain_loss[k], static_cast<long long>(r->chain_tokens[k]), r->chain_floor[k]);
    return 0;
  }
  std::string path = data_spec;
  bool text = false;
  if (path.starts_with("bin:")) {
    path = path.substr(4);
  } else if (path.starts_with("text:")) {
    path = path.substr(5);
    text = true;
  }
  auto toks = text ? data::ReadTextAsBytes(path) : data::ReadTokenFile(path, trained->vocab);
  if (!toks.ok()) return Fail(toks.status());
  // A file's loss does not depend on the batch: unless given, as many windows as fit in memory.
  auto r = model::EvaluateTokens(*trained, params, *toks, tokens, batch_flag.value_or(0), seq_len);
  if (!r.ok()) return Fail(r.status());
  std::printf("%s on %s: loss %.6f over %lld tokens\n", source.c_str(), path.c_str(), r->loss,
              static_cast<long long>(r->tokens));
  return 0;
}

}  // namespace diloco::ctl
