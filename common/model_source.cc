#include "common/model_source.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/hf_folder.h"
#include "common/manifest_json.h"
#include "common/safetensors_header.h"

namespace diloco {
namespace {

// The source's declared tensors as a ModelSource.
absl::StatusOr<ModelSource> FromDecls(const std::string& spec,
                                      absl::StatusOr<std::vector<DeclaredTensor>> decls) {
  if (!decls.ok()) return decls.status();
  absl::StatusOr<Manifest> m = ManifestFromDecls(*decls, spec);
  if (!m.ok()) return m.status();
  ModelSource s;
  s.spec = spec;
  s.manifest = *std::move(m);
  s.tensors = *std::move(decls);
  return s;
}

}  // namespace

absl::StatusOr<ModelSource> LoadModelSource(const std::string& spec) {
  const auto path_of = [&spec](absl::string_view prefix) -> absl::StatusOr<std::string> {
    std::string path(spec.substr(prefix.size()));
    if (path.empty())
      return absl::InvalidArgumentError(absl::StrCat("model ", spec, ": no path after ", prefix));
    return path;
  };
  if (absl::StartsWith(spec, "safetensors:")) {
    auto path = path_of("safetensors:");
    if (!path.ok()) return path.status();
    absl::StatusOr<SafetensorsDecls> d = ReadSafetensorsDecls(*path);
    if (!d.ok()) return d.status();
    return FromDecls(spec, std::move(d->tensors));
  }
  if (absl::StartsWith(spec, "hf:")) {
    auto path = path_of("hf:");
    if (!path.ok()) return path.status();
    return FromDecls(spec, ReadHfFolderDecls(*path));
  }
  if (absl::StartsWith(spec, "manifest:")) {
    auto path = path_of("manifest:");
    if (!path.ok()) return path.status();
    return FromDecls(spec, ReadManifestJson(*path));
  }
  for (const ModelFamily* family : ModelFamilies()) {
    if (!family->Claims(spec)) continue;
    absl::StatusOr<FamilyModel> f = family->Parse(spec);
    if (!f.ok())
      return absl::InvalidArgumentError(absl::StrCat(
          f.status().message(), "; or safetensors:PATH, hf:DIR or manifest:PATH for any model"));
    ModelSource s;
    s.spec = spec;
    s.family = std::string(family->name());
    s.config = std::move(f->config);
    s.manifest = std::move(f->manifest);
    for (const TensorSpec& t : s.manifest.tensors()) s.tensors.push_back({t.name, t.shape, ""});
    return s;
  }
  std::vector<std::string> usages;
  for (const ModelFamily* family : ModelFamilies()) usages.push_back(family->Usage());
  return absl::InvalidArgumentError(absl::StrCat(
      "model spec '", spec, "': expected ",
      usages.empty() ? "no family (none is linked into this program)" : absl::StrJoin(usages, "; "),
      "; or safetensors:PATH, hf:DIR or manifest:PATH for any model"));
}

}  // namespace diloco
