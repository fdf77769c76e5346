// diloco-ctl manifest: a model's manifest from any --model source (common/model_source.h), as
// the manifest JSON file (common/manifest_json.h) or compared with another model's.
//   diloco-ctl manifest --model=SOURCE [--out=PATH]   the JSON (to PATH, atomically, or stdout)
//   diloco-ctl manifest --model=SOURCE --diff=OTHER    the first differing tensor, or "same"
// With --diff the exit status is diff(1)'s: 0 the same tensors, 1 they differ, 2 an error or a
// usage error. It is how a learner refused for its model finds out why (common/model_refusal.h).
#include <cstdio>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/manifest_diff.h"
#include "common/manifest_json.h"
#include "common/model_source.h"
#include "common/plan_flags.h"
#include "ctl/commands.h"

ABSL_FLAG(std::string, diff, "",
          "manifest: another model source (any --model value) to compare --model's tensors with; "
          "prints the first differing tensor (exit 1) or that they are the same (exit 0)");

namespace diloco::ctl {
namespace {

std::string Summary(const ModelSource& s) {
  return absl::StrFormat(
      "%zu tensors, %llu parameters, fingerprint %016x", s.manifest.tensors().size(),
      static_cast<unsigned long long>(s.manifest.total_elements()), s.manifest.fingerprint());
}

}  // namespace

int ManifestCommand(const Args& args) {
  if (!args.empty() || !FlagGiven("model"))
    return Usage("manifest needs --model (and takes no store directories)");
  absl::StatusOr<ModelSource> model = ModelSourceFromFlags();
  if (!model.ok()) return Fail(model.status()) + 1;
  const std::string other_spec = absl::GetFlag(FLAGS_diff);
  const std::string out = absl::GetFlag(FLAGS_out);
  if (!out.empty()) {
    if (absl::Status s = WriteManifestJson(out, model->tensors, model->manifest, model->spec);
        !s.ok())
      return Fail(s) + 1;
    std::printf("wrote %s: %s\n", out.c_str(), Summary(*model).c_str());
  }
  if (other_spec.empty()) {
    if (out.empty())
      std::fputs(ManifestJson(model->tensors, model->manifest, model->spec).c_str(), stdout);
    return 0;
  }
  absl::StatusOr<ModelSource> other = LoadModelSource(other_spec);
  if (!other.ok())
    return Fail(absl::Status(other.status().code(),
                             absl::StrCat("--diff=", other_spec, ": ", other.status().message()))) +
           1;
  const std::string a = absl::StrCat("--diff=", other_spec);
  const std::string b = absl::StrCat("--model=", model->spec);
  const std::optional<std::string> d = FirstDifference(other->manifest, a, model->manifest, b);
  if (!d) {
    std::printf("same tensors: %s\n", Summary(*model).c_str());
    return 0;
  }
  std::printf("first difference: %s\n%s: %s\n%s: %s\n", d->c_str(), a.c_str(),
              Summary(*other).c_str(), b.c_str(), Summary(*model).c_str());
  return 1;
}

}  // namespace diloco::ctl
