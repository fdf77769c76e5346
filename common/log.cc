#include "common/log.h"

#include <unistd.h>

#include <cerrno>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace diloco {

std::string LogPrefix(LogLevel level) {
  return absl::StrCat(absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ ", absl::Now(), absl::UTCTimeZone()),
                      std::string(1, static_cast<char>(level)), " ");
}

void LogLine(LogLevel level, std::string_view text) {
  const std::string prefix = LogPrefix(level);
  std::string out;
  out.reserve(text.size() + 32);
  while (!text.empty()) {
    const size_t end = text.find('\n');
    const std::string_view line = text.substr(0, end);
    out.append(prefix).append(line).push_back('\n');
    if (end == std::string_view::npos) break;
    text.remove_prefix(end + 1);
  }
  if (out.empty()) out = prefix + "\n";
  for (size_t done = 0; done < out.size();) {
    const ssize_t n = ::write(STDERR_FILENO, out.data() + done, out.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // stderr closed: nothing else to tell
    done += static_cast<size_t>(n);
  }
}

}  // namespace diloco
