#include "tests/util/jsonl.h"

#include <fstream>

namespace diloco::testing {
namespace {

// Numbers of nested objects, depth first, each name taken once (the first found).
void AddNested(const Json& j, std::map<std::string, double>* out) {
  for (const auto& [key, v] : j.items()) {
    if (v.is_number())
      out->emplace(key, v.get<double>());
    else if (v.is_object())
      AddNested(v, out);
  }
}

}  // namespace

std::optional<Json> ParseJsonLine(std::string_view line) {
  Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return std::nullopt;
  return j;
}

std::vector<Json> ReadJsonLines(const std::filesystem::path& path) {
  std::vector<Json> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line))
    if (auto j = ParseJsonLine(line)) out.push_back(*std::move(j));
  return out;
}

std::string EventName(const Json& line) {
  const auto it = line.find("event");
  return it != line.end() && it->is_string() ? it->get<std::string>() : "";
}

std::optional<double> NumberAt(const Json& j, std::string_view path) {
  const Json* at = &j;
  while (true) {
    const size_t dot = path.find('.');
    const std::string key(path.substr(0, dot));
    if (!at->is_object()) return std::nullopt;
    const auto it = at->find(key);
    if (it == at->end()) return std::nullopt;
    at = &*it;
    if (dot == std::string_view::npos) break;
    path.remove_prefix(dot + 1);
  }
  if (!at->is_number()) return std::nullopt;
  return at->get<double>();
}

std::optional<double> JsonNumber(const std::string& json, const std::string& path) {
  const Json j = Json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return std::nullopt;
  return NumberAt(j, path);
}

std::map<std::string, double> NumbersOf(const Json& j) {
  std::map<std::string, double> out;
  if (!j.is_object()) return out;
  for (const auto& [key, v] : j.items())
    if (v.is_number()) out.emplace(key, v.get<double>());
  AddNested(j, &out);
  return out;
}

}  // namespace diloco::testing
