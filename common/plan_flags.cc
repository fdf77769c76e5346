#include "common/plan_flags.h"

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/flags/internal/parse.h"
#include "absl/flags/internal/usage.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage_config.h"
#include "absl/strings/match.h"
#include "common/plan.h"

ABSL_FLAG(std::string, model, "small",
          "the model: a model family's preset or spec, which the C++ trainers train: GPT's "
          "tiny, small, gpt2-124m, gpt2-350m or L=4,H=4,C=128,T=128,V=256, Llama's llama-tiny, "
          "llama-small or llama:L=2,H=4,KV=2,C=64,F=172,T=64,V=256 (CPU only); or any model by "
          "its tensors' "
          "names and shapes: safetensors:PATH (a file's header), hf:DIR (a Hugging Face folder: "
          "config.json and model.safetensors or its index) or manifest:PATH (a manifest JSON "
          "file, diloco-ctl manifest --out); every tensor travels as fp32 "
          "(common/model_source.h). The same tensors in every process of a fleet");
ABSL_FLAG(uint32_t, fragments, 4,
          "number of fragments the parameters are cut into; the same in every process of a fleet");
ABSL_FLAG(uint32_t, shards, 1,
          "number of shards; the same in every process of a fleet (a worker counts its "
          "--servers, and --shards, when given, must agree)");

namespace diloco {
namespace {

// Abseil 20220623 (Debian's) ends a refused parse with std::exit(1) and has no parse that returns
// the refusal (ParseAbseilFlagsOnly is newer), so an exit handler gives the status: set while
// Abseil parses, an exit is either a refusal or a help flag (flags_internal's help mode tells).
bool g_parsing = false;

// Printed after Abseil's refusal (ParseFlags' usage_on_error).
std::string& UsageOnError() {
  static auto* text = new std::string;
  return *text;
}

// Path suffixes of the files whose flags --help lists.
std::vector<std::string>& HelpFiles() {
  static auto* files = new std::vector<std::string>;
  return *files;
}

// Runs on std::exit: turns Abseil's status 1 for a refused command line into the project's
// usage-error status 2 (--help and friends keep Abseil's).
void ExitTwoOnRefusal() {
  if (!g_parsing ||
      absl::flags_internal::GetFlagsHelpMode() != absl::flags_internal::HelpMode::kNone)
    return;
  std::fputs(UsageOnError().c_str(), stderr);
  std::cout.flush();
  std::fflush(nullptr);
  std::_Exit(2);
}

// The plan of `shards` shards that --model and --fragments describe, checked.
absl::StatusOr<PlanSpec> MakePlanSpec(uint32_t shards) {
  PlanSpec p;
  p.model_spec = absl::GetFlag(FLAGS_model);
  p.num_fragments = absl::GetFlag(FLAGS_fragments);
  p.num_shards = shards;
  auto model = ModelSourceFromFlags();
  if (!model.ok()) return model.status();
  p.family = model->family;
  p.config = model->config;
  p.manifest = std::move(model->manifest);
  if (p.num_fragments == 0)
    return absl::InvalidArgumentError("--fragments=0: the plan needs at least one fragment");
  if (p.num_shards == 0)
    return absl::InvalidArgumentError("--shards=0: the plan needs at least one shard");
  const absl::Status st = Plan::Create(p.manifest, p.num_fragments, p.num_shards).status();
  if (!st.ok())
    return absl::InvalidArgumentError(absl::StrCat("--model=", p.model_spec,
                                                   " --fragments=", p.num_fragments,
                                                   " --shards=", p.num_shards, ": ", st.message()));
  return p;
}

}  // namespace

absl::StatusOr<ModelSource> ModelSourceFromFlags() {
  const std::string spec = absl::GetFlag(FLAGS_model);
  auto model = LoadModelSource(spec);
  if (!model.ok())
    return absl::Status(model.status().code(),
                        absl::StrCat("--model=", spec, ": ", model.status().message()));
  return model;
}

absl::StatusOr<ModelSource> TrainableModelFromFlags(absl::string_view what) {
  auto model = ModelSourceFromFlags();
  if (!model.ok()) return model.status();
  if (model->family.empty())
    return absl::InvalidArgumentError(
        absl::StrCat("--model=", model->spec, ": ", what,
                     " needs a model of a family the C++ trainer runs (a preset such as tiny, "
                     "small or llama-tiny, or a family's spec), not a model declared by its "
                     "tensors"));
  return model;
}

absl::StatusOr<PlanSpec> PlanFromFlags() { return MakePlanSpec(absl::GetFlag(FLAGS_shards)); }

absl::StatusOr<PlanSpec> PlanFromFlags(uint32_t num_shards, absl::string_view source) {
  if (FlagGiven("shards") && absl::GetFlag(FLAGS_shards) != num_shards)
    return absl::InvalidArgumentError(absl::StrCat("--shards=", absl::GetFlag(FLAGS_shards),
                                                   ": does not match the ", num_shards,
                                                   " shards of ", source));
  return MakePlanSpec(num_shards);
}

bool FlagGiven(absl::string_view flag) {
  return absl::flags_internal::WasPresentOnCommandLine(flag);
}

std::vector<char*> ParseFlags(int argc, char** argv, std::string usage_on_error,
                              std::initializer_list<absl::string_view> help_files) {
  UsageOnError() = std::move(usage_on_error);
  HelpFiles().assign({"common/plan_flags.cc"});
  for (absl::string_view f : help_files) HelpFiles().emplace_back(f);
  absl::FlagsUsageConfig config = absl::flags_internal::GetUsageConfig();
  config.contains_helpshort_flags = config.contains_help_flags = [](absl::string_view f) {
    for (const std::string& suffix : HelpFiles())
      if (absl::EndsWith(f, suffix)) return true;
    return false;
  };
  absl::SetFlagsUsageConfig(config);
  static const bool registered = std::atexit(ExitTwoOnRefusal) == 0;
  (void)registered;
  g_parsing = true;
  std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  g_parsing = false;
  return positional;
}

}  // namespace diloco
