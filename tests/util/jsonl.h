// JSON as the tests read it: the processes' JSON-lines files (a worker's or shard's
// --metrics_jsonl, a shard's --audit_jsonl) and the shards' Stats JSON, parsed with
// nlohmann-json. ReadJsonLines is the tests' one JSON-lines reader; the helpers below pick
// numbers out of what it returns.
#pragma once

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace diloco::testing {

using Json = nlohmann::json;

// One line as a JSON object; nullopt for anything else, e.g. the last line of a file whose
// writer was killed mid-line.
std::optional<Json> ParseJsonLine(std::string_view line);

// The objects of a JSON-lines file in file order, lines that are not objects left out; empty
// when the file does not exist (yet).
std::vector<Json> ReadJsonLines(const std::filesystem::path& path);

// A line's "event" member; "" when it has none.
std::string EventName(const Json& line);

// The number at a dotted path of members, "rounds" or "versions.3"; nullopt when a member is
// missing or the value is not a number.
std::optional<double> NumberAt(const Json& j, std::string_view path);
// The same in JSON text (a shard's Stats); nullopt also when the text is not JSON.
std::optional<double> JsonNumber(const std::string& json, const std::string& path);

// The numbers of an object by member name: its own, then those of the objects nested in it
// under their own names where the top level does not have that name (a shard's progress event
// nests its Stats: {"event":"progress","stats":{"rounds":3,...}} gives rounds). Strings,
// booleans and arrays are left out.
std::map<std::string, double> NumbersOf(const Json& j);

}  // namespace diloco::testing
