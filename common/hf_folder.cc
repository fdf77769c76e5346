#include "common/hf_folder.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "common/safetensors_header.h"

namespace diloco {
namespace {

namespace fs = std::filesystem;

// A small JSON file (config.json, the index), parsed; errors name the file.
absl::StatusOr<nlohmann::json> ReadJsonFile(const fs::path& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path.string()));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  try {
    nlohmann::json j = nlohmann::json::parse(text);
    if (!j.is_object())
      return absl::InvalidArgumentError(absl::StrCat(path.string(), ": not a JSON object"));
    return j;
  } catch (const nlohmann::json::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": malformed JSON: ", e.what()));
  }
}

// The tensors of the files an index names, checked against its weight_map.
absl::StatusOr<std::vector<DeclaredTensor>> ReadSharded(const fs::path& dir,
                                                        const fs::path& index_path) {
  const std::string index_name = index_path.string();
  absl::StatusOr<nlohmann::json> index = ReadJsonFile(index_path);
  if (!index.ok()) return index.status();
  const auto map = index->find("weight_map");
  if (map == index->end() || !map->is_object() || map->empty())
    return absl::InvalidArgumentError(
        absl::StrCat(index_name, ": no \"weight_map\" object naming each tensor's file"));
  std::map<std::string, std::string> file_of;  // tensor -> file
  std::map<std::string, bool> files;           // sorted file names
  for (const auto& [name, file] : map->items()) {
    if (!file.is_string())
      return absl::InvalidArgumentError(absl::StrCat(index_name, ": tensor ", name, " maps to ",
                                                     file.dump(), ", not a file name"));
    const std::string f = file.get<std::string>();
    if (f.empty() || fs::path(f).filename() != f || f == "." || f == "..")
      return absl::InvalidArgumentError(absl::StrCat(index_name, ": tensor ", name, " maps to ", f,
                                                     ", not a file of the folder"));
    file_of[name] = f;
    files[f] = true;
  }
  std::vector<DeclaredTensor> out;
  for (const auto& [file, unused] : files) {
    const fs::path path = dir / file;
    absl::StatusOr<SafetensorsDecls> decls = ReadSafetensorsDecls(path.string());
    if (!decls.ok()) return decls.status();
    for (const DeclaredTensor& t : decls->tensors) {
      const auto it = file_of.find(t.name);
      if (it == file_of.end() || it->second != file)
        return absl::InvalidArgumentError(absl::StrCat(
            path.string(), ": holds tensor ", t.name, ", which ", index_name,
            it == file_of.end() ? " does not list" : absl::StrCat(" places in ", it->second)));
      file_of.erase(it);
      out.push_back(t);
    }
    for (const auto& [alias, kept] : decls->aliases) {
      const auto it = file_of.find(alias);
      if (it != file_of.end() && it->second == file) file_of.erase(it);
    }
  }
  if (!file_of.empty())
    return absl::InvalidArgumentError(absl::StrCat(index_name, ": lists tensor ",
                                                   file_of.begin()->first, " in ",
                                                   file_of.begin()->second, ", which lacks it"));
  return out;
}

}  // namespace

absl::StatusOr<std::vector<DeclaredTensor>> ReadHfFolderDecls(const std::string& dir_name) {
  const fs::path dir(dir_name);
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return absl::NotFoundError(absl::StrCat("Hugging Face folder ", dir_name, ": not a directory"));
  const fs::path config = dir / "config.json";
  if (!fs::is_regular_file(config, ec))
    return absl::NotFoundError(absl::StrCat("Hugging Face folder ", dir_name,
                                            ": no config.json (a model folder holds config.json "
                                            "beside its weights)"));
  if (absl::StatusOr<nlohmann::json> c = ReadJsonFile(config); !c.ok()) return c.status();
  const fs::path single = dir / "model.safetensors";
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::is_regular_file(single, ec)) {
    absl::StatusOr<SafetensorsDecls> decls = ReadSafetensorsDecls(single.string());
    if (!decls.ok()) return decls.status();
    return std::move(decls->tensors);
  }
  if (fs::is_regular_file(index, ec)) return ReadSharded(dir, index);
  const bool bin = fs::exists(dir / "pytorch_model.bin", ec) ||
                   fs::exists(dir / "pytorch_model.bin.index.json", ec);
  return absl::NotFoundError(absl::StrCat(
      "Hugging Face folder ", dir_name,
      ": neither model.safetensors nor model.safetensors.index.json",
      bin ? " (pytorch_model.bin is not read: save with safe_serialization=True)" : ""));
}

absl::StatusOr<HfFolderFiles> FindHfFolderFiles(const std::string& dir_name) {
  if (absl::StatusOr<std::vector<DeclaredTensor>> d = ReadHfFolderDecls(dir_name); !d.ok())
    return d.status();
  const fs::path dir(dir_name);
  HfFolderFiles out;
  out.config = (dir / "config.json").string();
  std::error_code ec;
  if (const fs::path single = dir / "model.safetensors"; fs::is_regular_file(single, ec)) {
    out.weights.push_back(single.string());
    return out;
  }
  // Accepted above: the index parses and its weight_map names files of the folder.
  absl::StatusOr<nlohmann::json> index = ReadJsonFile(dir / "model.safetensors.index.json");
  if (!index.ok()) return index.status();
  std::map<std::string, bool> files;  // sorted, each once
  for (const auto& [name, file] : index->at("weight_map").items())
    files[file.get<std::string>()] = true;
  for (const auto& [file, unused] : files) out.weights.push_back((dir / file).string());
  return out;
}

}  // namespace diloco
