#include "common/manifest_json.h"

#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>
#include <span>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/atomic_file.h"

namespace diloco {
namespace {

using Json = nlohmann::ordered_json;

constexpr char kFormat[] = "diloco-manifest";
constexpr int kVersion = 1;

std::string Hex(uint64_t v) { return absl::StrFormat("%016x", v); }

// Refuses any key of `object` not in `allowed`.
absl::Status OnlyKeys(const Json& object, const std::set<std::string>& allowed,
                      const std::string& where) {
  for (const auto& [key, v] : object.items())
    if (!allowed.contains(key))
      return absl::InvalidArgumentError(absl::StrCat(where, ": unknown key \"", key, "\""));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<DeclaredTensor>> Parse(const Json& doc, const std::string& path) {
  const auto bad = [&path](const std::string& why) {
    return absl::InvalidArgumentError(absl::StrCat("manifest file ", path, ": ", why));
  };
  if (!doc.is_object()) return bad("not a JSON object");
  if (absl::Status s =
          OnlyKeys(doc, {"format", "version", "tensors", "source", "fingerprint", "parameters"},
                   absl::StrCat("manifest file ", path));
      !s.ok())
    return s;
  if (!doc.contains("format") || doc["format"] != kFormat)
    return bad(absl::StrCat("\"format\" must be \"", kFormat, "\""));
  if (!doc.contains("version") || doc["version"] != kVersion)
    return bad(absl::StrCat("\"version\" must be ", kVersion));
  const auto tensors = doc.find("tensors");
  if (tensors == doc.end() || !tensors->is_array() || tensors->empty())
    return bad("\"tensors\" must be a non-empty array of {\"name\", \"shape\"}");
  std::vector<DeclaredTensor> out;
  for (const Json& t : *tensors) {
    const std::string where = absl::StrCat("tensor ", out.size());
    if (!t.is_object()) return bad(absl::StrCat(where, " is not an object"));
    const auto name = t.find("name");
    if (name == t.end() || !name->is_string()) return bad(absl::StrCat(where, " has no \"name\""));
    DeclaredTensor d;
    d.name = name->get<std::string>();
    const std::string named = absl::StrCat("tensor ", d.name);
    if (absl::Status s = OnlyKeys(t, {"name", "shape", "dtype"},
                                  absl::StrCat("manifest file ", path, ": ", named));
        !s.ok())
      return s;
    const auto shape = t.find("shape");
    if (shape == t.end() || !shape->is_array())
      return bad(absl::StrCat(named, " has no \"shape\" array"));
    for (const Json& dim : *shape) {
      if (!dim.is_number_integer())
        return bad(absl::StrCat(named, ": dimension ", dim.dump(), " is not an integer"));
      d.shape.push_back(dim.get<int64_t>());
    }
    if (const auto dtype = t.find("dtype"); dtype != t.end()) {
      if (!dtype->is_string()) return bad(absl::StrCat(named, ": \"dtype\" is not a string"));
      d.dtype = dtype->get<std::string>();
    }
    out.push_back(std::move(d));
  }
  absl::StatusOr<Manifest> m = ManifestFromDecls(out, absl::StrCat("manifest file ", path));
  if (!m.ok()) return m.status();
  if (const auto fp = doc.find("fingerprint"); fp != doc.end())
    if (!fp->is_string() || fp->get<std::string>() != Hex(m->fingerprint()))
      return bad(absl::StrCat("\"fingerprint\" ", fp->dump(), " is not its tensors' (",
                              Hex(m->fingerprint()), "): the file was edited or damaged"));
  if (const auto n = doc.find("parameters"); n != doc.end())
    if (!n->is_number_unsigned() || n->get<uint64_t>() != m->total_elements())
      return bad(absl::StrCat("\"parameters\" ", n->dump(), " is not its tensors' total (",
                              m->total_elements(), ")"));
  return out;
}

}  // namespace

absl::StatusOr<std::vector<DeclaredTensor>> ReadManifestJson(const std::string& path) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open manifest file ", path));
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Json doc;
  try {
    doc = Json::parse(text);
  } catch (const Json::parse_error& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("manifest file ", path, ": malformed JSON: ", e.what()));
  }
  return Parse(doc, path);
}

std::string ManifestJson(const std::vector<DeclaredTensor>& tensors, const Manifest& m,
                         const std::string& source) {
  Json doc = {{"format", kFormat}, {"version", kVersion}};
  if (!source.empty()) doc["source"] = source;
  doc["fingerprint"] = Hex(m.fingerprint());
  doc["parameters"] = m.total_elements();
  Json list = Json::array();
  for (const DeclaredTensor& t : tensors) {
    Json e = {{"name", t.name}, {"shape", t.shape}};
    if (!t.dtype.empty()) e["dtype"] = t.dtype;
    list.push_back(std::move(e));
  }
  doc["tensors"] = std::move(list);
  // One tensor a line: readable and diffable, small even for hundreds of tensors.
  std::string out = "{\n";
  for (const auto& [key, v] : doc.items()) {
    if (key == "tensors") continue;
    absl::StrAppend(&out, "  ", Json(key).dump(), ": ", v.dump(), ",\n");
  }
  out += "  \"tensors\": [\n";
  const Json& list_ref = doc["tensors"];
  for (size_t i = 0; i < list_ref.size(); ++i)
    absl::StrAppend(&out, "    ", list_ref[i].dump(), i + 1 < list_ref.size() ? ",\n" : "\n");
  out += "  ]\n}\n";
  return out;
}

absl::Status WriteManifestJson(const std::string& path, const std::vector<DeclaredTensor>& tensors,
                               const Manifest& m, const std::string& source) {
  const std::string text = ManifestJson(tensors, m, source);
  const std::span<const char> pieces[] = {{text.data(), text.size()}};
  return WriteFileAtomically(path, pieces);
}

}  // namespace diloco
