#include "worker/model/safetensors.h"

#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/safetensors.h"

namespace diloco::model {

absl::StatusOr<std::vector<float>> ReadSafetensorsParams(const std::string& path,
                                                         const Manifest& manifest) {
  auto file = ReadSafetensors(path);
  if (!file.ok()) return file.status();
  std::map<std::string, const LoadedTensor*> by_name;
  for (const auto& t : file->tensors) by_name[t.name] = &t;
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
  }
  return flat;
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
