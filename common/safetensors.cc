#include "common/safetensors.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/atomic_file.h"

namespace diloco {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;    // the reference implementation's cap
constexpr uint64_t kMaxElements = uint64_t{1} << 40;  // per dimension and per tensor
constexpr int kMaxDepth = 16;                         // of nested arrays and objects

using Json = nlohmann::ordered_json;  // ordered: the header lists tensors in data order

// `v` as a count in [0, limit]; nullopt for a negative, fractional or larger number, or for
// anything that is not a number.
std::optional<uint64_t> Count(const Json& v, uint64_t limit) {
  if (!v.is_number_unsigned()) return std::nullopt;
  const uint64_t n = v.get<uint64_t>();
  if (n > limit) return std::nullopt;
  return n;
}

}  // namespace

absl::Status WriteSafetensors(const std::string& path, std::span<const SafetensorsTensor> tensors,
                              const std::map<std::string, std::string>& metadata) {
  Json doc = Json::object();
  if (!metadata.empty()) doc["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const SafetensorsTensor& t : tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) return absl::InvalidArgumentError(absl::StrCat(t.name, ": negative dimension"));
      numel *= static_cast<uint64_t>(d);
    }
    if (numel != t.data.size())
      return absl::InvalidArgumentError(
          absl::StrCat(t.name, ": shape holds ", numel, " values, data has ", t.data.size()));
    if (t.name == "__metadata__")
      return absl::InvalidArgumentError("a tensor may not be named __metadata__");
    if (doc.contains(t.name))
      return absl::InvalidArgumentError(absl::StrCat("two tensors are named ", t.name));
    const uint64_t end = offset + t.data.size_bytes();
    doc[t.name] = {{"dtype", "F32"}, {"shape", t.shape}, {"data_offsets", {offset, end}}};
    offset = end;
  }
  std::string header;
  try {
    header = doc.dump();
  } catch (const Json::type_error& e) {  // a name or metadata text that is not UTF-8
    return absl::InvalidArgumentError(absl::StrCat("safetensors header: ", e.what()));
  }
  header.append((8 - header.size() % 8) % 8, ' ');

  const uint64_t n = header.size();
  std::vector<std::span<const char>> pieces;
  pieces.reserve(2 + tensors.size());
  pieces.emplace_back(reinterpret_cast<const char*>(&n), sizeof(n));
  pieces.emplace_back(header.data(), header.size());
  for (const SafetensorsTensor& t : tensors)
    pieces.emplace_back(reinterpret_cast<const char*>(t.data.data()), t.data.size_bytes());
  return WriteFileAtomically(path, pieces);
}

absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  auto bad = [&](std::string_view why) {
    return absl::DataLossError(
        absl::StrCat("safetensors file ", path, ": ", absl::string_view(why.data(), why.size())));
  };
  uint64_t n = 0;
  if (bytes.size() < 8) return bad("shorter than its header length");
  std::memcpy(&n, bytes.data(), 8);
  if (n > kMaxHeaderBytes || n > bytes.size() - 8) return bad("header length beyond the file");
  // Values nested deeper than a header's 3 levels are dropped as they are read, so a hostile
  // header of 100 MB of '[' costs no memory; meeting one makes the header bad.
  bool too_deep = false;
  const auto limit_depth = [&too_deep](int depth, Json::parse_event_t, Json&) {
    if (depth <= kMaxDepth) return true;
    too_deep = true;
    return false;
  };
  Json doc;
  try {
    doc = Json::parse(std::string_view(bytes).substr(8, n), limit_depth);
  } catch (const Json::parse_error& e) {  // e.what() names the byte and what was expected
    return bad(absl::StrCat("malformed JSON header: ", e.what()));
  }
  if (too_deep) return bad(absl::StrCat("header nested deeper than ", kMaxDepth, " levels"));
  if (!doc.is_object()) return bad("header is not a JSON object");
  const std::string_view data = std::string_view(bytes).substr(8 + n);
  SafetensorsFile file;
  std::vector<std::pair<uint64_t, LoadedTensor>> found;
  for (const auto& [name, v] : doc.items()) {
    if (name == "__metadata__") {
      if (!v.is_object()) return bad("__metadata__ is not an object");
      for (const auto& [key, value] : v.items()) {
        if (!value.is_string()) return bad("metadata values must be strings");
        file.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) return bad(absl::StrCat(name, ": not a tensor entry (an object)"));
    const auto dtype = v.find("dtype");
    const auto shape = v.find("shape");
    const auto offsets = v.find("data_offsets");
    if (dtype == v.end() || !dtype->is_string() || *dtype != "F32")
      return bad(absl::StrCat(name, ": only F32 tensors are read"));
    if (shape == v.end() || !shape->is_array() || offsets == v.end() || !offsets->is_array() ||
        offsets->size() != 2)
      return bad(absl::StrCat(name, ": missing shape or data_offsets"));
    LoadedTensor t;
    t.name = name;
    uint64_t numel = 1;
    for (const Json& d : *shape) {
      const std::optional<uint64_t> dim = Count(d, kMaxElements);
      if (!dim) return bad(absl::StrCat(name, ": bad dimension"));
      t.shape.push_back(static_cast<int64_t>(*dim));
      numel *= *dim;
      if (numel > kMaxElements) return bad(absl::StrCat(name, ": too large"));
    }
    const std::optional<uint64_t> b = Count((*offsets)[0], data.size());
    const std::optional<uint64_t> e = Count((*offsets)[1], data.size());
    if (!b || !e || *e < *b || *e - *b != numel * sizeof(float))
      return bad(absl::StrCat(name, ": data_offsets disagree with its shape or the file"));
    t.data.resize(numel);
    if (numel > 0) std::memcpy(t.data.data(), data.data() + *b, numel * sizeof(float));
    found.emplace_back(*b, std::move(t));
  }
  std::stable_sort(found.begin(), found.end(),
                   [](const auto& x, const auto& y) { return x.first < y.first; });
  for (auto& [off, t] : found) file.tensors.push_back(std::move(t));
  return file;
}

absl::StatusOr<std::vector<SafetensorsTensor>> ManifestTensors(const Manifest& manifest,
                                                               std::span<const float> params) {
  if (params.size() != manifest.total_elements())
    return absl::InvalidArgumentError(absl::StrCat("safetensors: ", params.size(),
                                                   " values for a model of ",
                                                   manifest.total_elements(), " parameters"));
  std::vector<SafetensorsTensor> tensors;
  tensors.reserve(manifest.tensors().size());
  for (const TensorSpec& t : manifest.tensors())
    tensors.push_back({t.name, t.shape, params.subspan(t.offset, t.numel())});
  return tensors;
}

absl::Status WriteHfFolder(const std::string& dir, const std::string& config_json,
                           std::span<const SafetensorsTensor> tensors,
                           std::map<std::string, std::string> metadata) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat("creating ", dir, ": ", ec.message()));
  const std::span<const char> pieces[] = {{config_json.data(), config_json.size()}};
  if (absl::Status s = WriteFileAtomically(dir + "/config.json", pieces); !s.ok()) return s;
  metadata["format"] = "pt";
  return WriteSafetensors(dir + "/model.safetensors", tensors, metadata);
}

}  // namespace diloco
