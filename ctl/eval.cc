// diloco-ctl eval: the held-out loss of a model, from a safetensors file (an export, a worker's
// --save_model) or straight from the shards' stores (the global model they hold, no file), on
// every token of a token file (or its first N predicted tokens), or on exactly the worker's
// default synthetic held-out set (same tokens, windows and arithmetic as diloco-worker's own
// figure, with the entropy floor and the per-chain figures). Always prints the token count.
#include <cstdio>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/model_spec.h"
#include "ctl/commands.h"
#include "storage/model_export.h"
#include "worker/data/source.h"
#include "worker/data/token_file.h"
#include "worker/model/evaluate.h"
#include "worker/model/param_layout.h"
#include "worker/model/safetensors.h"

namespace diloco::ctl {
namespace {

// Parses flags[key] into *v when present; false on a malformed value.
template <typename T>
bool IntFlag(std::map<std::string, std::string>& flags, const std::string& key, T* v) {
  return !flags.count(key) || absl::SimpleAtoi(flags[key], v);
}

}  // namespace

int Eval(int argc, char** argv) {
  std::map<std::string, std::string> flags;
  std::vector<std::string> stores;
  std::string error;
  if (!ParseArgs(argc, argv,
                 {"model", "params", "data", "tokens", "batch", "seq_len", "eval_batches",
                  "fragments", "shards"},
                 &flags, &stores, &error))
    return Usage(error);
  const bool from_file = !flags["params"].empty();
  if (flags["model"].empty() || flags["data"].empty() || from_file == !stores.empty())
    return Usage(
        "eval needs --model, --data=FILE.bin|synthetic and either --params=FILE.safetensors or "
        "--fragments=P --shards=S STORE_DIR...");
  int64_t tokens = 0;
  int batch = 8, seq_len = 0, eval_batches = 4;  // diloco-worker's defaults
  if (!IntFlag(flags, "tokens", &tokens) || tokens < 0 || !IntFlag(flags, "batch", &batch) ||
      batch < 1 || !IntFlag(flags, "seq_len", &seq_len) || seq_len < 0 ||
      !IntFlag(flags, "eval_batches", &eval_batches) || eval_batches < 1)
    return Usage(
        "--tokens and --seq_len must be integers >= 0, --batch and --eval_batches integers >= 1");
  const bool synthetic = flags["data"] == "synthetic";
  if (synthetic && flags.count("tokens"))
    return Usage(
        "--tokens applies to a token file; --data=synthetic is the worker's held-out "
        "set (size it with --batch, --seq_len, --eval_batches)");
  if (!synthetic && flags.count("eval_batches"))
    return Usage("--eval_batches applies to --data=synthetic only");
  auto cfg = ParseGptConfig(flags["model"]);
  if (!cfg.ok()) return Fail(cfg.status());
  auto layout = model::MakeParamLayout(*cfg);
  if (!layout.ok()) return Fail(layout.status());

  // The parameters, in manifest order.
  std::vector<float> params;
  std::string source;
  if (from_file) {
    auto p = model::ReadSafetensorsParams(flags["params"], layout->manifest);
    if (!p.ok()) return Fail(p.status());
    params = *std::move(p);
    source = flags["params"];
  } else {
    storage::ExportRequest req;
    req.model_spec = flags["model"];
    req.stores = stores;
    if (!absl::SimpleAtoi(flags["fragments"], &req.num_fragments) || req.num_fragments == 0 ||
        !absl::SimpleAtoi(flags["shards"], &req.num_shards) || req.num_shards == 0)
      return Usage("evaluating stores needs --fragments and --shards (positive integers)");
    auto m = storage::AssembleModel(req);
    if (!m.ok()) return Fail(m.status());
    params = std::move(m->params);
    source = absl::StrCat("stores ", absl::StrJoin(stores, ","), " (fragment versions ",
                          absl::StrJoin(m->summary.fragment_versions, ","), ")");
  }

  if (synthetic) {
    model::TrainerOptions o;  // what diloco-worker evaluates with its default --data=synthetic
    o.model = *cfg;
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
  std::string path = flags["data"];
  bool text = false;
  if (path.starts_with("bin:")) {
    path = path.substr(4);
  } else if (path.starts_with("text:")) {
    path = path.substr(5);
    text = true;
  }
  auto toks = text ? data::ReadTextAsBytes(path) : data::ReadTokenFile(path, cfg->vocab);
  if (!toks.ok()) return Fail(toks.status());
  // A file's loss does not depend on the batch: unless given, as many windows as fit in memory.
  auto r =
      model::EvaluateTokens(*cfg, params, *toks, tokens, flags.count("batch") ? batch : 0, seq_len);
  if (!r.ok()) return Fail(r.status());
  std::printf("%s on %s: loss %.6f over %lld tokens\n", source.c_str(), path.c_str(), r->loss,
              static_cast<long long>(r->tokens));
  return 0;
}

}  // namespace diloco::ctl
