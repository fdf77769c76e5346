#include "worker/model/safetensors.h"

#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/hf_layout.h"
#include "common/safetensors.h"

namespace diloco::model {

namespace {

// The manifest's tensors out of a file in the project's layout; with `strict`, a tensor the
// manifest lacks is an error too.
absl::StatusOr<std::vector<float>> FlatFromOwn(const SafetensorsFile& file,
                                               const Manifest& manifest, const std::string& path,
                                               bool strict) {
  std::map<std::string, const LoadedTensor*> by_name;
  for (const auto& t : file.tensors) by_name[t.name] = &t;
  std::vector<float> flat(manifest.total_elements());
  for (const auto& spec : manifest.tensors()) {
    auto it = by_name.find(spec.name);
    if (it == by_name.end())
      return absl::NotFoundError(absl::StrCat(path, ": no tensor ", spec.name));
    if (it->second->shape != spec.shape)
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor ", spec.name, " has shape [", absl::StrJoin(it->second->shape, ","),
          "], the model needs [", absl::StrJoin(spec.shape, ","), "]"));
    std::copy(it->second->data.begin(), it->second->data.end(), flat.begin() + spec.offset);
    by_name.erase(it);
  }
  if (strict && !by_name.empty())
    return absl::InvalidArgumentError(absl::StrCat(path, ": tensor ", by_name.begin()->first,
                                                   " is not a parameter of this model"));
  return flat;
}

}  // namespace

absl::StatusOr<std::vector<float>> ReadSafetensorsParams(const std::string& path,
                                                         const Manifest& manifest) {
  auto file = ReadSafetensors(path);
  if (!file.ok()) return file.status();
  return FlatFromOwn(*file, manifest, path, /*strict=*/false);
}

absl::StatusOr<std::vector<float>> ReadModelForInit(const std::string& path,
                                                    const Manifest& manifest) {
  std::error_code ec;
  const std::string file_path =
      std::filesystem::is_directory(path, ec) ? path + "/model.safetensors" : path;
  auto file = ReadSafetensors(file_path);
  if (!file.ok()) return file.status();
  // GPT-2 in Hugging Face's layout, unless the manifest itself has those names (a model
  // declared by an hf: or safetensors: source is read by its own names).
  const bool own_names = !file->tensors.empty() && manifest.Find(file->tensors[0].name);
  if (IsHfLayout(*file) && !own_names) return FlatFromHf(*file, manifest, file_path);
  return FlatFromOwn(*file, manifest, file_path, /*strict=*/true);
}

absl::Status WriteSafetensors(const std::string& path, const Manifest& manifest,
                              std::span<const float> params,
                              const std::map<std::string, std::string>& metadata) {
  if (params.size() != manifest.total_elements())
    return absl::InvalidArgumentError(absl::StrCat(
        "safetensors: ", params.size(), " values for a manifest of ", manifest.total_elements()));
  std::vector<SafetensorsTensor> tensors;
  for (const auto& t : manifest.tensors())
    tensors.push_back({t.name, t.shape, params.subspan(t.offset, t.numel())});
  return diloco::WriteSafetensors(path, tensors, metadata);
}

absl::Status CheckWritable(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (path.empty()) return absl::InvalidArgumentError("empty output path");
  if (fs::is_directory(path, ec))
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory, not a file name"));
  fs::path dir = fs::path(path).parent_path();
  if (dir.empty()) dir = ".";
  if (!fs::is_directory(dir, ec))
    return absl::NotFoundError(absl::StrCat(path, ": directory ", dir.string(), " does not exist"));
  if (::access(dir.c_str(), W_OK) != 0)
    return absl::PermissionDeniedError(
        absl::StrCat(path, ": directory ", dir.string(), " is not writable"));
  return absl::OkStatus();
}

}  // namespace diloco::model
