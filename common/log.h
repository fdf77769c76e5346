// The programs' lines on stderr, lined up across hosts: each line starts with its UTC time to
// the millisecond and a level letter (I, W, E), then the program's own text, which names the
// process as it always did ("diloco-worker[3]: ...", "worker 3 step ...", "shard 0 | ..."):
//
//   2026-12-06T21:15:03.123Z I diloco-worker[3]: resumes its schedule at step 120 of 300
//
// Sorting several hosts' stderr files by their first field interleaves them by time (clocks
// kept by NTP agree to milliseconds). One write(2) per call, so the lines of several threads
// never mix within a line.
#pragma once

#include <string>
#include <string_view>

#include "absl/strings/str_format.h"

namespace diloco {

enum class LogLevel : char { kInfo = 'I', kWarning = 'W', kError = 'E' };

// Writes `text` to stderr, each of its lines (split at '\n'; a trailing one is not a line)
// behind the time and the level.
void LogLine(LogLevel level, std::string_view text);

// "2026-12-06T21:15:03.123Z I " for now: what LogLine puts before each line.
std::string LogPrefix(LogLevel level);

template <typename... Args>
void Logf(LogLevel level, const absl::FormatSpec<Args...>& format, const Args&... args) {
  LogLine(level, absl::StrFormat(format, args...));
}

}  // namespace diloco
