#include "common/event_log.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/log.h"

namespace diloco {

std::string JsonDump(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string JsonString(std::string_view v) { return JsonDump(nlohmann::ordered_json(v)); }

double JsonObject::FloatAsDouble(float v) {
  if (!std::isfinite(v)) return v;
  char buf[32];
  const auto end = std::to_chars(buf, buf + sizeof(buf), v).ptr;  // shortest round trip
  double d = v;
  std::from_chars(buf, end, d);
  return d;
}

JsonObject& JsonObject::AddRaw(std::string_view key, std::string_view json) {
  auto value = nlohmann::ordered_json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (value.is_discarded()) {
    Logf(LogLevel::kError, "JsonObject::AddRaw(\"%.*s\"): not JSON: %.*s",
         static_cast<int>(key.size()), key.data(), static_cast<int>(json.size()), json.data());
    std::abort();
  }
  j_[std::string(key)] = std::move(value);
  return *this;
}

absl::StatusOr<EventLog> EventLog::Open(const std::string& path) {
  EventLog log;
  if (path.empty()) return log;
  log.f_ = std::fopen(path.c_str(), "a");
  if (!log.f_)
    return absl::InvalidArgumentError(
        absl::StrCat("cannot open --metrics_jsonl file ", path, ": ", std::strerror(errno)));
  return log;
}

EventLog& EventLog::operator=(EventLog&& o) noexcept {
  if (this != &o) {
    if (f_) std::fclose(f_);
    f_ = o.f_;
    o.f_ = nullptr;
  }
  return *this;
}

EventLog::~EventLog() {
  if (f_) std::fclose(f_);
}

void EventLog::Write(const JsonObject& o) {
  if (!f_) return;
  // Every event says when it was written, on the wall clock (seconds since the Unix epoch, to
  // the millisecond), so that several hosts' logs interleave by time (docs/operations.md).
  std::string line = o.str();
  const std::string stamp = absl::StrFormat(
      "\"wall_time\":%.3f}\n", absl::ToDoubleMilliseconds(absl::Now() - absl::UnixEpoch()) / 1e3);
  line.pop_back();  // the closing brace
  if (line.size() > 1) line += ',';
  line += stamp;
  std::fwrite(line.data(), 1, line.size(), f_);
  std::fflush(f_);
}

}  // namespace diloco
