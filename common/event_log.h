// JSON-lines event log (--metrics-jsonl): one object per line, flushed per event, so machines
// can follow a run while it goes. Objects are built with JsonObject, a small builder over
// nlohmann::ordered_json (the project's one JSON library) that keeps members in the order they
// were added, so a line reads the way its writer wrote it.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/status/statusor.h"

namespace diloco {

// `v` as a JSON string literal (quoted and escaped by nlohmann), for text spliced into JSON that
// is built elsewhere. Bytes that are not UTF-8 become U+FFFD rather than an error.
std::string JsonString(std::string_view v);

// The text of `j` on one line; invalid UTF-8 in its strings is replaced, never thrown on.
std::string JsonDump(const nlohmann::ordered_json& j);

// What JsonObject::Add takes: anything nlohmann can make a JSON value of.
template <typename T>
concept JsonValue = std::is_constructible_v<nlohmann::ordered_json, const T&>;

class JsonObject {
 public:
  // One member: a number, string, bool, container or nlohmann value. A key added twice keeps
  // its first place and its last value; a non-finite number is written as null.
  template <JsonValue T>
  JsonObject& Add(std::string_view key, const T& v) {
    if constexpr (std::is_same_v<T, float>)
      j_[std::string(key)] = FloatAsDouble(v);
    else
      j_[std::string(key)] = v;
    return *this;
  }
  // One member whose value is JSON text the program made (e.g. Shard::StatsJson()). Such text
  // is never outside input, so text that does not parse is a bug: it is reported on stderr,
  // naming the key and the text, and the process aborts rather than log a line without it.
  JsonObject& AddRaw(std::string_view key, std::string_view json);

  std::string str() const { return JsonDump(j_); }
  const nlohmann::ordered_json& json() const { return j_; }

 private:
  // The double nearest the float's shortest decimal form: a loss of 3.2f is written 3.2, not
  // 3.200000047683716 (the float widened as it is).
  static double FloatAsDouble(float v);

  nlohmann::ordered_json j_ = nlohmann::ordered_json::object();
};

class EventLog {
 public:
  // An empty path gives a log that drops everything.
  static absl::StatusOr<EventLog> Open(const std::string& path);
  EventLog() = default;
  EventLog(EventLog&& o) noexcept : f_(o.f_) { o.f_ = nullptr; }
  EventLog& operator=(EventLog&& o) noexcept;
  ~EventLog();
  // One line: `o` with a last member "wall_time" (seconds since the Unix epoch, ms precision).
  void Write(const JsonObject& o);

 private:
  std::FILE* f_ = nullptr;
};

}  // namespace diloco
