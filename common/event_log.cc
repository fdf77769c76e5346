#include "common/event_log.h"

#include <cerrno>
#include <cmath>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace diloco {

void JsonObject::Key(std::string_view key) {
  if (!body_.empty()) body_ += ",";
  body_ += "\"";
  body_.append(key.data(), key.size());
  body_ += "\":";
}

JsonObject& JsonObject::Add(std::string_view key, double v) {
  Key(key);
  body_ += std::isfinite(v) ? absl::StrCat(v) : "null";
  return *this;
}

JsonObject& JsonObject::Add(std::string_view key, uint64_t v) {
  Key(key);
  absl::StrAppend(&body_, v);
  return *this;
}

JsonObject& JsonObject::Add(std::string_view key, int64_t v) {
  Key(key);
  absl::StrAppend(&body_, v);
  return *this;
}

std::string JsonString(std::string_view v) {
  std::string out = "\"";
  for (char c : v) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  out += "\"";
  return out;
}

JsonObject& JsonObject::Add(std::string_view key, std::string_view v) {
  Key(key);
  body_ += JsonString(v);
  return *this;
}

JsonObject& JsonObject::AddRaw(std::string_view key, std::string_view json) {
  Key(key);
  body_.append(json.data(), json.size());
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
  const std::string line = o.str() + "\n";
  std::fwrite(line.data(), 1, line.size(), f_);
  std::fflush(f_);
}

}  // namespace diloco
