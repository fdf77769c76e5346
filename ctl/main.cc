// diloco-ctl: operations tools.
//   diloco-ctl show --store=DIR
//   diloco-ctl export --model=SPEC --fragments=P --shards=S --out=FILE.safetensors STORE_DIR...
//   diloco-ctl export --format=hf ... --out=DIR STORE_DIR...   a Hugging Face folder: the
//       built-in GPT in GPT-2's layout, an hf:DIR model under its own names with its config.json
//   diloco-ctl stats --server=ENDPOINT [--curve_server_key=K --curve_secret_key_file=F]
//                                                   live statistics of a running shard (JSON)
//   diloco-ctl eval --model=SPEC (--params=FILE.safetensors | --fragments=P --shards=S
//                   STORE_DIR...) --data=FILE.bin|synthetic [--tokens=N] [...]
//   diloco-ctl gen-data --out=FILE.bin [--tokens=N] [--worker=I --workers=N] [--seed=S]
//   diloco-ctl gen-data --out=FILE.bin --heldout     the workers' synthetic held-out stream
//   diloco-ctl manifest --model=SOURCE [--out=FILE.json | --diff=OTHER]   a model's manifest
//   diloco-ctl keys --out=DIR (--workers=N | --worker_ids=LIST) [--overwrite]   CURVE keys
//   diloco-ctl keys --out=DIR --add=ID               one more learner's keys
// Exit status: 0 on success, 1 on an error (printed on stderr; for show: any unreadable or
// lost checkpoint), 2 on a usage error (an unknown subcommand, a flag it does not take, a bad
// value): the message, then the usage text.
// The command line is read with Abseil flags (ctl/commands.h); --flagfile works as for the
// other programs, and one flag file of plan flags can serve the fleet and diloco-ctl alike.
#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/flags/usage.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/model_family.h"
#include "common/plan_flags.h"
#include "common/version.h"
#include "ctl/commands.h"
#include "ctl/export_any.h"
#include "schema/wire.h"
#include "storage/model_export.h"

namespace diloco::ctl {
namespace {

// export's --format.
enum class ExportFormat { kSafetensors, kHf };
constexpr Choice<ExportFormat> kExportFormats[] = {{"safetensors", ExportFormat::kSafetensors},
                                                   {"hf", ExportFormat::kHf}};

bool AbslParseFlag(absl::string_view text, ExportFormat* v, std::string* error) {
  return ParseChoice(text, kExportFormats, v, error);
}
std::string AbslUnparseFlag(ExportFormat v) { return UnparseChoice(v, kExportFormats); }

}  // namespace
}  // namespace diloco::ctl

ABSL_FLAG(std::string, store, "", "show: the store directory (or give it as an argument)");
ABSL_FLAG(std::string, out, "",
          "export: the .safetensors file (--format=hf: the directory) to write; gen-data: the "
          ".bin file to write; manifest: the manifest JSON file to write");
ABSL_FLAG(std::optional<int64_t>, tokens, std::nullopt,
          "eval: evaluate the first N predicted tokens of the file (default: all); gen-data: "
          "tokens to write (default: 1048576)");
ABSL_FLAG(diloco::ctl::ExportFormat, format, diloco::ctl::ExportFormat::kSafetensors,
          "export: safetensors (one file: the built-in GPT in the project's layout, what eval "
          "--params reads; any other model under its own names) or hf (a Hugging Face folder, "
          "DIR/config.json and DIR/model.safetensors: the built-in GPT in GPT-2's layout, a "
          "--model=hf:DIR model under its own names with its config.json)");

namespace diloco::ctl {
namespace {

constexpr char kUsage[] =
    "usage:\n"
    "  diloco-ctl show --store=DIR\n"
    "  diloco-ctl export --model=SPEC --fragments=P --shards=S --out=FILE.safetensors "
    "STORE_DIR...\n"
    "  diloco-ctl export --format=hf --model=SPEC --fragments=P --shards=S --out=DIR "
    "STORE_DIR...\n"
    "      The built-in GPT: --format=hf writes DIR/config.json and DIR/model.safetensors in\n"
    "      Hugging Face's GPT-2 layout (GPT2LMHeadModel names, Conv1D matrices [in, out], tied\n"
    "      head), for GPT2LMHeadModel.from_pretrained(DIR); the default format is the\n"
    "      project's own (GPT2Model names, matrices [out, in]), what diloco-ctl eval --params\n"
    "      reads. Any other --model (hf:DIR, safetensors:PATH, manifest:PATH): F32 tensors\n"
    "      under the names the source declared (tied names as the source has them);\n"
    "      --format=hf (hf:DIR only) also copies the source's config.json, generation config\n"
    "      and tokenizer files, so DIR opens where the source folder opened.\n"
    "  diloco-ctl stats --server=tcp://HOST:PORT [--timeout_ms=N]\n"
    "      [--curve_server_key=KEY|FILE --curve_secret_key_file=FILE]   a CURVE shard: a key it\n"
    "      lists (any worker's)\n"
    "  diloco-ctl top --servers=tcp://HOST:PORT,... [--interval=1s] [--once | --json]\n"
    "      [--timeout_ms=N] [CURVE flags as stats]   a live view of the fleet: one line per\n"
    "      learner (its heartbeats' figures), the totals and each shard's round rate,\n"
    "      refreshed in place; --once one table, --json one JSON document; a shard that does\n"
    "      not answer within --timeout_ms shows as \"no answer\".\n"
    "  diloco-ctl eval --model=SPEC --params=FILE.safetensors --data=FILE.bin [--tokens=N]\n"
    "  diloco-ctl eval --model=SPEC --fragments=P --shards=S --data=FILE.bin STORE_DIR...\n"
    "  diloco-ctl eval --model=SPEC --params=FILE.safetensors --data=synthetic "
    "[--eval_batches=4]\n"
    "      the held-out loss and the number of predicted tokens it is over. The model: a\n"
    "      safetensors file (an export, diloco-worker --save_model) or the global model held in\n"
    "      the shards' stores (as export would write it). --data=FILE.bin (or bin:FILE,\n"
    "      text:FILE): every token of the file, or its first N predicted tokens with\n"
    "      --tokens=N. --data=synthetic: exactly diloco-worker's default held-out set (the same\n"
    "      tokens, windows and count as the worker's own figure for the same --batch=8,\n"
    "      --seq_len=context, --eval_batches=4), with the entropy floor and per-chain figures;\n"
    "      the set depends on --batch x --eval_batches only (--batch=1 --eval_batches=32 is the\n"
    "      default set in 1/8 of the memory).\n"
    "      --batch sets the windows per forward pass (for a file: memory only, by default as\n"
    "      many as fit in 2 GiB of activations, at most 8), --seq_len the window length.\n"
    "  diloco-ctl gen-data --out=FILE.bin [--tokens=N] [--worker=I --workers=N] [--seed=S]\n"
    "  diloco-ctl gen-data --out=FILE.bin --heldout\n"
    "      synthetic Markov text; --heldout: exactly the workers' default held-out stream\n"
    "      (segment s from chain s % K; --data=synthetic evaluates evenly spread windows of it).\n"
    "  diloco-ctl manifest --model=SOURCE [--out=FILE.json]\n"
    "      the manifest JSON of any --model (a GPT preset or spec, safetensors:PATH, hf:DIR,\n"
    "      manifest:PATH), written atomically to FILE.json or printed; serve it with\n"
    "      --model=manifest:FILE.json.\n"
    "  diloco-ctl manifest --model=SOURCE --diff=OTHER\n"
    "      the first tensor (position, name, shape) where OTHER and SOURCE differ; exit 0 when\n"
    "      they declare the same tensors, 1 when they differ (manifest: 2 on an error).\n"
    "  diloco-ctl keys --out=DIR (--workers=N | --worker_ids=0,1,2) [--overwrite]\n"
    "      a cluster's CURVE keys: DIR/server.secret and server.public (the shards'),\n"
    "      worker-ID.secret and worker-ID.public per learner, and authorized_keys (the shards'\n"
    "      --curve_authorized_keys); secret keys mode 0600. Keys already in DIR are kept\n"
    "      (an error) unless --overwrite, which makes a new set.\n"
    "  diloco-ctl keys --out=DIR --add=ID\n"
    "      one more learner's key pair, listed in DIR/authorized_keys (restart the shards).\n";

struct Command {
  absl::string_view name;
  int (*run)(const Args&);
  std::vector<absl::string_view> flags;  // the flags it takes
};

const std::vector<Command>& Commands() {
  static const auto* commands = new std::vector<Command>{
      {"show", Show, {"store"}},
      {"export", Export, {"model", "fragments", "shards", "out", "format"}},
      {"stats", Stats, {"server", "timeout_ms", "curve_server_key", "curve_secret_key_file"}},
      {"top",
       Top,
       {"servers", "interval", "once", "json", "timeout_ms", "curve_server_key",
        "curve_secret_key_file"}},
      {"eval",
       Eval,
       {"model", "params", "data", "tokens", "batch", "seq_len", "eval_batches", "fragments",
        "shards"}},
      {"gen-data", GenData, {"out", "tokens", "worker", "workers", "seed", "heldout"}},
      {"manifest", ManifestCommand, {"model", "out", "diff"}},
      {"keys", Keys, {"out", "workers", "worker_ids", "add", "overwrite"}},
  };
  return *commands;
}

// A flag of another subcommand given to `c`: its name, or "" if none.
std::string ForeignFlag(const Command& c) {
  for (const Command& other : Commands())
    for (absl::string_view f : other.flags)
      if (FlagGiven(f) && std::find(c.flags.begin(), c.flags.end(), f) == c.flags.end())
        return std::string(f);
  return "";
}

}  // namespace

int Usage(const std::string& why) {
  std::fprintf(stderr, "diloco-ctl: %s\n%s", why.c_str(), kUsage);
  return 2;
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "diloco-ctl: %s\n", s.ToString().c_str());
  return 1;
}

int Show(const Args& args) {
  std::string store = absl::GetFlag(FLAGS_store);
  if (store.empty()) {
    if (args.size() != 1) return Usage("show needs --store=DIR");
    store = args[0];
  }
  absl::StatusOr<storage::StoreReport> report = storage::DescribeStore(store);
  if (!report.ok()) return Fail(report.status());
  std::fputs(report->text.c_str(), stdout);
  for (const std::string& p : report->problems) std::fprintf(stderr, "diloco-ctl: %s\n", p.c_str());
  return report->problems.empty() ? 0 : 1;  // a damaged store is not a success
}

int Export(const Args& stores) {
  storage::ExportRequest req;
  req.out = absl::GetFlag(FLAGS_out);
  req.stores = stores;
  if (!FlagGiven("model") || !FlagGiven("fragments") || !FlagGiven("shards") || req.out.empty() ||
      req.stores.empty())
    return Usage("export needs --model, --fragments, --shards, --out and store directories");
  if (absl::GetFlag(FLAGS_fragments) == 0 || absl::GetFlag(FLAGS_shards) == 0)
    return Usage("--fragments and --shards must be positive integers");
  absl::StatusOr<PlanSpec> plan = PlanFromFlags();
  if (!plan.ok()) return Fail(plan.status());
  req.model_spec = plan->model_spec;
  req.num_fragments = plan->num_fragments;
  req.num_shards = plan->num_shards;
  absl::StatusOr<storage::ExportSummary> s;
  const bool hf = absl::GetFlag(FLAGS_format) == ExportFormat::kHf;
  if (plan->family.empty()) {  // any other model: its own names, from any source (ctl/export_any.h)
    if (hf && !absl::StartsWith(plan->model_spec, "hf:"))
      return Usage(absl::StrCat(
          "--format=hf of a model other than the built-in GPT carries its Hugging Face "
          "folder's config.json: give --model=hf:DIR, the folder the model came from (a "
          "manifest of the same tensors serves the same stores), or export --format=safetensors "
          "(--model=",
          plan->model_spec, " has no config.json)"));
    absl::StatusOr<storage::AssembledModel> m = storage::AssembleModel(req);
    if (!m.ok()) return Fail(m.status());
    if (absl::Status st = WriteAnyModelExport(plan->model_spec, hf, req.out, *m); !st.ok())
      return Fail(st);
    s = m->summary;
  } else if (hf) {
    absl::StatusOr<storage::AssembledModel> m = storage::AssembleModel(req);
    if (!m.ok()) return Fail(m.status());
    const ModelFamily* family = FindModelFamily(plan->family);
    if (absl::Status st =
            family->WriteHf(req.out, plan->config, m->manifest, m->params, m->metadata);
        !st.ok())
      return Fail(st);
    s = m->summary;
  } else {
    s = storage::ExportModel(req);
  }
  if (!s.ok()) return Fail(s.status());
  std::printf("wrote %s: %zu tensors, %llu bytes, plan %016llx, fragment versions %s\n",
              req.out.c_str(), s->tensors, static_cast<unsigned long long>(s->bytes),
              static_cast<unsigned long long>(s->plan_fingerprint),
              absl::StrJoin(s->fragment_versions, ",").c_str());
  return 0;
}

}  // namespace diloco::ctl

int main(int argc, char** argv) {
  using namespace diloco::ctl;
  if (argc >= 2) {
    const std::string first = argv[1];
    if (first == "-h" || first == "--help" || first == "help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
  }
  diloco::SetVersionFlag("diloco-ctl", diloco::wire::kProtocolVersion);
  absl::SetProgramUsageMessage(
      "diloco-ctl SUBCOMMAND [flags] [STORE_DIR...]; diloco-ctl help for the subcommands");
  const std::vector<char*> positional =
      diloco::ParseFlags(argc, argv, kUsage,
                         {"ctl/main.cc", "ctl/eval.cc", "ctl/gen_data.cc", "ctl/stats.cc",
                          "ctl/top.cc", "ctl/manifest.cc", "ctl/keys.cc"});
  if (positional.size() < 2) return Usage("missing subcommand");
  const std::string name = positional[1];
  for (const Command& c : Commands()) {
    if (c.name != name) continue;
    if (const std::string f = ForeignFlag(c); !f.empty())
      return Usage(absl::StrCat(name, " does not take --", f));
    return c.run(Args(positional.begin() + 2, positional.end()));
  }
  return Usage("unknown subcommand '" + name + "'");
}
