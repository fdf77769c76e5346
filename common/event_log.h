// JSON-lines event log (--metrics-jsonl): one object per line, flushed per event, so machines
// can follow a run while it goes. Values are added already formatted; strings are escaped.
#pragma once

#include <cstdio>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"

namespace diloco {

// `v` as a JSON string literal: quoted, with quotes, backslashes and control bytes escaped.
std::string JsonString(std::string_view v);

class JsonObject {
 public:
  JsonObject& Add(std::string_view key, double v);
  JsonObject& Add(std::string_view key, uint64_t v);
  JsonObject& Add(std::string_view key, int64_t v);
  JsonObject& Add(std::string_view key, int v) { return Add(key, static_cast<int64_t>(v)); }
  JsonObject& Add(std::string_view key, std::string_view v);
  JsonObject& AddRaw(std::string_view key, std::string_view json);
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void Key(std::string_view key);
  std::string body_;
};

class EventLog {
 public:
  // An empty path gives a log that drops everything.
  static absl::StatusOr<EventLog> Open(const std::string& path);
  EventLog() = default;
  EventLog(EventLog&& o) noexcept : f_(o.f_) { o.f_ = nullptr; }
  EventLog& operator=(EventLog&& o) noexcept;
  ~EventLog();
  void Write(const JsonObject& o);

 private:
  std::FILE* f_ = nullptr;
};

}  // namespace diloco
