#include "ctl/export_any.h"

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <nlohmann/json.hpp>
#include <span>
#include <system_error>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"
#include "common/hf_folder.h"
#include "common/safetensors_header.h"

namespace diloco::ctl {
namespace {

namespace fs = std::filesystem;

// kept name -> the names tied to it (over the same bytes) in the source's safetensors files.
using Ties = std::multimap<std::string, std::string>;

absl::Status AddTies(const std::string& file, Ties* ties) {
  absl::StatusOr<SafetensorsDecls> d = ReadSafetensorsDecls(file);
  if (!d.ok()) return d.status();
  for (const auto& [alias, kept] : d->aliases) ties->emplace(kept, alias);
  return absl::OkStatus();
}

absl::StatusOr<Ties> SourceTies(const std::string& spec) {
  Ties ties;
  if (absl::StartsWith(spec, "safetensors:")) {
    if (absl::Status s = AddTies(spec.substr(12), &ties); !s.ok()) return s;
  } else if (absl::StartsWith(spec, "hf:")) {
    absl::StatusOr<HfFolderFiles> f = FindHfFolderFiles(spec.substr(3));
    if (!f.ok()) return f.status();
    for (const std::string& w : f->weights)
      if (absl::Status s = AddTies(w, &ties); !s.ok()) return s;
  }  // manifest:PATH names each tensor once
  return ties;
}

// The manifest's tensors as F32, each tied name over its tensor's bytes right after it.
absl::Status WriteF32WithTies(const std::string& path, const storage::AssembledModel& m,
                              const Ties& ties, std::map<std::string, std::string> metadata) {
  metadata["format"] = "pt";
  nlohmann::ordered_json doc = nlohmann::ordered_json::object();
  doc["__metadata__"] = metadata;
  uint64_t offset = 0;
  std::vector<std::span<const char>> pieces;
  for (const TensorSpec& t : m.manifest.tensors()) {
    const uint64_t end = offset + t.numel() * sizeof(float);
    const nlohmann::ordered_json entry = {
        {"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, end}}};
    doc[t.name] = entry;
    const auto [first, last] = ties.equal_range(t.name);
    for (auto it = first; it != last; ++it) {
      if (m.manifest.Find(it->second) != nullptr || doc.contains(it->second))
        return absl::InvalidArgumentError(absl::StrCat("export: the source ties ", it->second,
                                                       " to ", t.name, " and also declares it"));
      doc[it->second] = entry;
    }
    pieces.emplace_back(reinterpret_cast<const char*>(m.params.data() + t.offset),
                        t.numel() * sizeof(float));
    offset = end;
  }
  std::string header;
  try {
    header = doc.dump();
  } catch (const nlohmann::ordered_json::type_error& e) {  // a name that is not UTF-8
    return absl::InvalidArgumentError(absl::StrCat("export: safetensors header: ", e.what()));
  }
  header.append((8 - header.size() % 8) % 8, ' ');  // the data 8-byte aligned
  const uint64_t n = header.size();
  pieces.insert(pieces.begin(),
                {{reinterpret_cast<const char*>(&n), sizeof(n)}, {header.data(), header.size()}});
  return WriteFileAtomically(path, pieces);
}

struct Carried {
  std::string name, bytes;
};

// The source folder's config.json (required, already checked to be a JSON object by
// FindHfFolderFiles) and whichever other carried files it has, read whole.
absl::StatusOr<std::vector<Carried>> ReadCarried(const fs::path& dir) {
  std::vector<Carried> out;
  for (const char* name : kHfCarriedFiles) {
    const fs::path p = dir / name;
    std::error_code ec;
    if (!fs::is_regular_file(p, ec)) continue;  // config.json: FindHfFolderFiles saw it
    std::ifstream in(p, std::ios::binary);
    if (!in) return absl::NotFoundError(absl::StrCat("export: cannot read ", p.string()));
    out.push_back({name, std::string(std::istreambuf_iterator<char>(in), {})});
  }
  if (out.empty() || out[0].name != "config.json")
    return absl::NotFoundError(absl::StrCat("export: ", dir.string(), " has no config.json"));
  return out;
}

absl::Status WriteHfFolder(const std::string& source, const std::string& out,
                           const storage::AssembledModel& m, const Ties& ties) {
  if (absl::StatusOr<HfFolderFiles> f = FindHfFolderFiles(source); !f.ok()) return f.status();
  absl::StatusOr<std::vector<Carried>> carried = ReadCarried(source);
  if (!carried.ok()) return carried.status();
  std::error_code ec;
  if (fs::exists(out, ec) && fs::equivalent(out, source, ec))
    return absl::InvalidArgumentError(
        absl::StrCat("export: --out=", out, " is the source folder ", source,
                     "; export into another folder (its weights would be replaced)"));
  if (fs::exists(fs::path(out) / "model.safetensors.index.json", ec))
    return absl::FailedPreconditionError(absl::StrCat(
        "export: ", out,
        " holds model.safetensors.index.json (a sharded checkpoint, whose "
        "shards would sit beside the export's one file); export into a folder without one"));
  fs::create_directories(out, ec);
  if (ec) return absl::InternalError(absl::StrCat("export: creating ", out, ": ", ec.message()));
  if (absl::Status s =
          WriteF32WithTies((fs::path(out) / "model.safetensors").string(), m, ties, m.metadata);
      !s.ok())
    return s;
  for (const Carried& c : *carried) {
    const std::span<const char> pieces[] = {{c.bytes.data(), c.bytes.size()}};
    if (absl::Status s = WriteFileAtomically((fs::path(out) / c.name).string(), pieces); !s.ok())
      return s;
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WriteAnyModelExport(const std::string& model_spec, bool hf_folder,
                                 const std::string& out, const storage::AssembledModel& m) {
  absl::StatusOr<Ties> ties = SourceTies(model_spec);
  if (!ties.ok()) return ties.status();
  if (!hf_folder) return WriteF32WithTies(out, m, *ties, m.metadata);
  if (!absl::StartsWith(model_spec, "hf:"))
    return absl::InvalidArgumentError(
        absl::StrCat("export --format=hf: --model=", model_spec, " has no config.json to carry"));
  return WriteHfFolder(model_spec.substr(3), out, m, *ties);
}

}  // namespace diloco::ctl
