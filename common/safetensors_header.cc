#include "common/safetensors_header.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string_view>
#include <system_error>
#include <tuple>

#include "absl/strings/str_cat.h"

namespace diloco {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;    // the reference implementation's cap
constexpr uint64_t kMaxElements = uint64_t{1} << 40;  // per dimension and per tensor
constexpr int kMaxDepth = 16;                         // of nested arrays and objects

using Json = nlohmann::ordered_json;  // ordered: ties keep the header's first name

std::optional<uint64_t> Count(const Json& v, uint64_t limit) {
  if (!v.is_number_unsigned()) return std::nullopt;
  const uint64_t n = v.get<uint64_t>();
  if (n > limit) return std::nullopt;
  return n;
}

struct Entry {
  DeclaredTensor decl;
  uint64_t begin = 0, end = 0;
  size_t order = 0;  // in the header
};

std::string Range(const Entry& e) { return absl::StrCat("[", e.begin, ",", e.end, ")"); }

}  // namespace

absl::StatusOr<SafetensorsDecls> ReadSafetensorsDecls(const std::string& path) {
  const auto bad = [&path](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("safetensors file ", path, ": ", why));
  };
  std::error_code ec;
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) return absl::NotFoundError(absl::StrCat("cannot open ", path, ": ", ec.message()));
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  uint64_t n = 0;
  if (size < 8 || !in.read(reinterpret_cast<char*>(&n), 8))
    return bad("shorter than its header length");
  if (n > kMaxHeaderBytes || n > size - 8) return bad("header length beyond the file");
  std::string header(n, '\0');
  if (!in.read(header.data(), static_cast<std::streamsize>(n))) return bad("header cut short");
  const uint64_t data_size = size - 8 - n;

  // Duplicate top-level keys would silently overwrite each other in the parsed object: caught
  // as they are read. Values nested deeper than a header's levels are dropped unread.
  bool too_deep = false;
  std::string duplicate;
  std::set<std::string> keys;
  const auto check = [&](int depth, Json::parse_event_t event, Json& parsed) {
    if (depth > kMaxDepth) {
      too_deep = true;
      return false;
    }
    if (event == Json::parse_event_t::key && depth == 1 && parsed.is_string() &&
        !keys.insert(parsed.get<std::string>()).second && duplicate.empty())
      duplicate = parsed.get<std::string>();
    return true;
  };
  Json doc;
  try {
    doc = Json::parse(header, check);
  } catch (const Json::parse_error& e) {
    return bad(absl::StrCat("malformed JSON header: ", e.what()));
  }
  if (too_deep) return bad(absl::StrCat("header nested deeper than ", kMaxDepth, " levels"));
  if (!doc.is_object()) return bad("header is not a JSON object");
  if (!duplicate.empty()) return bad(absl::StrCat("tensor ", duplicate, " is declared twice"));

  std::vector<Entry> entries;
  for (const auto& [name, v] : doc.items()) {
    if (name == "__metadata__") continue;
    if (!v.is_object()) return bad(absl::StrCat("tensor ", name, ": not a tensor entry"));
    const auto dtype = v.find("dtype");
    const auto shape = v.find("shape");
    const auto offsets = v.find("data_offsets");
    if (dtype == v.end() || !dtype->is_string() || shape == v.end() || !shape->is_array() ||
        offsets == v.end() || !offsets->is_array() || offsets->size() != 2)
      return bad(absl::StrCat("tensor ", name, ": missing dtype, shape or data_offsets"));
    Entry e;
    e.decl.name = name;
    e.decl.dtype = dtype->get<std::string>();
    e.order = entries.size();
    uint64_t numel = 1;
    for (const Json& d : *shape) {
      const std::optional<uint64_t> dim = Count(d, kMaxElements);
      if (!dim) return bad(absl::StrCat("tensor ", name, ": bad dimension ", d.dump()));
      e.decl.shape.push_back(static_cast<int64_t>(*dim));
      if (*dim != 0 && numel > kMaxElements / *dim)  // checked before it could overflow
        return bad(absl::StrCat("tensor ", name, ": too large"));
      numel *= *dim;
    }
    if (absl::Status s = CheckDeclared(e.decl, absl::StrCat("safetensors file ", path)); !s.ok())
      return s;
    const std::optional<uint64_t> b = Count((*offsets)[0], UINT64_MAX);
    const std::optional<uint64_t> end = Count((*offsets)[1], UINT64_MAX);
    if (!b || !end || *end < *b)
      return bad(absl::StrCat("tensor ", name, ": data_offsets ", offsets->dump(),
                              " are not a range [begin, end]"));
    e.begin = *b;
    e.end = *end;
    if (e.end > data_size)
      return bad(absl::StrCat("tensor ", name, ": data_offsets ", Range(e),
                              " lie outside the file's data section of ", data_size, " bytes"));
    const uint64_t want = numel * static_cast<uint64_t>(*FloatDtypeBytes(e.decl.dtype));
    if (e.end - e.begin != want)
      return bad(absl::StrCat("tensor ", name, ": data_offsets ", Range(e), " hold ",
                              e.end - e.begin, " bytes; shape ", ShapeString(e.decl.shape), " of ",
                              e.decl.dtype, " is ", want, " bytes"));
    entries.push_back(std::move(e));
  }

  std::sort(entries.begin(), entries.end(), [](const Entry& x, const Entry& y) {
    return std::tie(x.begin, x.end, x.order) < std::tie(y.begin, y.end, y.order);
  });
  SafetensorsDecls out;
  const Entry* last = nullptr;  // the latest tensor kept
  for (const Entry& e : entries) {
    if (last != nullptr && e.begin == last->begin && e.end == last->end) {
      if (e.decl.shape != last->decl.shape || e.decl.dtype != last->decl.dtype)
        return bad(absl::StrCat("tensors ", last->decl.name, " and ", e.decl.name,
                                " share the bytes ", Range(e),
                                " but differ in shape or dtype (tied weights are one tensor)"));
      out.aliases[e.decl.name] = last->decl.name;
      continue;
    }
    if (last != nullptr && e.begin < last->end)
      return bad(absl::StrCat("tensor ", e.decl.name, " (bytes ", Range(e), ") overlaps tensor ",
                              last->decl.name, " (bytes ", Range(*last), ")"));
    out.tensors.push_back(e.decl);
    last = &e;
  }
  return out;
}

}  // namespace diloco
