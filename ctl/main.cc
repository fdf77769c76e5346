// diloco-ctl: operations tools.
//   diloco-ctl show --store=DIR
//   diloco-ctl export --model=SPEC --fragments=P --shards=S --out=FILE.safetensors STORE_DIR...
//   diloco-ctl export --format=hf ... --out=DIR STORE_DIR...   Hugging Face's GPT-2 layout
//   diloco-ctl stats --server=ENDPOINT [--curve_server_key=K --curve_secret_key_file=F]
//                                                   live statistics of a running shard (JSON)
//   diloco-ctl eval --model=SPEC (--params=FILE.safetensors | --fragments=P --shards=S
//                   STORE_DIR...) --data=FILE.bin|synthetic [--tokens=N] [...]
//   diloco-ctl gen-data --out=FILE.bin [--tokens=N] [--worker=I --workers=N] [--seed=S]
//   diloco-ctl gen-data --out=FILE.bin --heldout     the workers' synthetic held-out stream
// Exit status: 0 on success, 1 on an error (printed on stderr; for show: any unreadable or
// lost checkpoint), 2 on a usage error.
#include <algorithm>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "common/hf_layout.h"
#include "common/model_spec.h"
#include "ctl/commands.h"
#include "storage/model_export.h"

namespace {

constexpr char kUsage[] =
    "usage:\n"
    "  diloco-ctl show --store=DIR\n"
    "  diloco-ctl export --model=SPEC --fragments=P --shards=S --out=FILE.safetensors "
    "STORE_DIR...\n"
    "  diloco-ctl export --format=hf --model=SPEC --fragments=P --shards=S --out=DIR "
    "STORE_DIR...\n"
    "      --format=hf: DIR/config.json and DIR/model.safetensors in Hugging Face's GPT-2 layout\n"
    "      (GPT2LMHeadModel names, Conv1D matrices [in, out], tied head), for\n"
    "      GPT2LMHeadModel.from_pretrained(DIR); the default format is the project's own\n"
    "      (GPT2Model names, matrices [out, in]), what diloco-ctl eval --params reads.\n"
    "  diloco-ctl stats --server=tcp://HOST:PORT [--timeout_ms=N]\n"
    "      [--curve_server_key=KEY|FILE --curve_secret_key_file=FILE]   a CURVE shard: a key it\n"
    "      lists (any worker's)\n"
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
    "      (segment s from chain s % K; --data=synthetic evaluates evenly spread windows of it).\n";

}  // namespace

namespace diloco::ctl {

int Usage(const std::string& why) {
  std::fprintf(stderr, "diloco-ctl: %s\n%s", why.c_str(), kUsage);
  return 2;
}

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "diloco-ctl: %s\n", s.ToString().c_str());
  return 1;
}

bool ParseArgs(int argc, char** argv, const std::vector<std::string>& known,
               std::map<std::string, std::string>* flags, std::vector<std::string>* positional,
               std::string* error, const std::vector<std::string>& switches) {
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (!a.starts_with("--")) {
      positional->push_back(a);
      continue;
    }
    const size_t eq = a.find('=');
    const std::string key = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
    const bool is_switch = std::find(switches.begin(), switches.end(), key) != switches.end();
    if (!is_switch && std::find(known.begin(), known.end(), key) == known.end()) {
      *error = "unknown flag " + a;
      return false;
    }
    if (eq == std::string::npos && is_switch) {
      (*flags)[key] = "true";
    } else if (eq == std::string::npos) {
      if (i + 1 >= argc) {
        *error = "flag --" + key + " needs a value";
        return false;
      }
      (*flags)[key] = argv[++i];
    } else {
      (*flags)[key] = a.substr(eq + 1);
    }
  }
  return true;
}

namespace {

int Show(int argc, char** argv) {
  std::map<std::string, std::string> flags;
  std::vector<std::string> pos;
  std::string error;
  if (!ParseArgs(argc, argv, {"store"}, &flags, &pos, &error)) return Usage(error);
  if (!flags.count("store")) {
    if (pos.size() != 1) return Usage("show needs --store=DIR");
    flags["store"] = pos[0];
  }
  absl::StatusOr<diloco::storage::StoreReport> report =
      diloco::storage::DescribeStore(flags["store"]);
  if (!report.ok()) return Fail(report.status());
  std::fputs(report->text.c_str(), stdout);
  for (const std::string& p : report->problems) std::fprintf(stderr, "diloco-ctl: %s\n", p.c_str());
  return report->problems.empty() ? 0 : 1;  // a damaged store is not a success
}

int Export(int argc, char** argv) {
  std::map<std::string, std::string> flags;
  std::vector<std::string> pos;
  std::string error;
  if (!ParseArgs(argc, argv, {"model", "fragments", "shards", "out", "format"}, &flags, &pos,
                 &error))
    return Usage(error);
  const std::string format = flags.count("format") ? flags["format"] : "safetensors";
  if (format != "safetensors" && format != "hf")
    return Usage("--format=" + format + ": expected safetensors or hf");
  diloco::storage::ExportRequest req;
  req.model_spec = flags["model"];
  req.out = flags["out"];
  req.stores = pos;
  if (req.model_spec.empty() || req.out.empty() || req.stores.empty())
    return Usage("export needs --model, --fragments, --shards, --out and store directories");
  if (!absl::SimpleAtoi(flags["fragments"], &req.num_fragments) || req.num_fragments == 0 ||
      !absl::SimpleAtoi(flags["shards"], &req.num_shards) || req.num_shards == 0)
    return Usage("--fragments and --shards must be positive integers");
  absl::StatusOr<diloco::storage::ExportSummary> s;
  if (format == "hf") {
    absl::StatusOr<diloco::GptConfig> config = diloco::ParseGptConfig(req.model_spec);
    if (!config.ok()) return Fail(config.status());
    absl::StatusOr<diloco::storage::AssembledModel> m = diloco::storage::AssembleModel(req);
    if (!m.ok()) return Fail(m.status());
    if (absl::Status st =
            diloco::WriteHfModel(req.out, *config, m->manifest, m->params, m->metadata);
        !st.ok())
      return Fail(st);
    s = m->summary;
  } else {
    s = diloco::storage::ExportModel(req);
  }
  if (!s.ok()) return Fail(s.status());
  std::printf("wrote %s: %zu tensors, %llu bytes, plan %016llx, fragment versions %s\n",
              req.out.c_str(), s->tensors, static_cast<unsigned long long>(s->bytes),
              static_cast<unsigned long long>(s->plan_fingerprint),
              absl::StrJoin(s->fragment_versions, ",").c_str());
  return 0;
}

}  // namespace
}  // namespace diloco::ctl

int main(int argc, char** argv) {
  using namespace diloco::ctl;
  if (argc < 2) return Usage("missing subcommand");
  const std::string cmd = argv[1];
  if (cmd == "show") return Show(argc, argv);
  if (cmd == "export") return Export(argc, argv);
  if (cmd == "stats") return Stats(argc, argv);
  if (cmd == "eval") return Eval(argc, argv);
  if (cmd == "gen-data") return GenData(argc, argv);
  if (cmd == "-h" || cmd == "--help" || cmd == "help") {
    std::fputs(kUsage, stdout);
    return 0;
  }
  return Usage("unknown subcommand '" + cmd + "'");
}
