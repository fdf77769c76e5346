#include "common/process_memory.h"

#include <fstream>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace diloco {

absl::StatusOr<ProcessMemory> ReadProcessMemory(pid_t pid) {
  const std::string path =
      pid == 0 ? std::string("/proc/self/status") : absl::StrCat("/proc/", pid, "/status");
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read ", path));
  ProcessMemory m;
  bool rss = false, hwm = false;
  for (std::string line; std::getline(in, line);) {
    absl::string_view v = line;
    uint64_t* dst = nullptr;
    if (absl::ConsumePrefix(&v, "VmRSS:")) {
      dst = &m.resident_bytes;
      rss = true;
    } else if (absl::ConsumePrefix(&v, "VmHWM:")) {
      dst = &m.peak_resident_bytes;
      hwm = true;
    } else {
      continue;
    }
    v = absl::StripAsciiWhitespace(v);
    if (!absl::ConsumeSuffix(&v, " kB") || !absl::SimpleAtoi(absl::StripAsciiWhitespace(v), dst))
      return absl::DataLossError(absl::StrCat(path, ": unreadable line \"", line, "\""));
    *dst *= 1024;
  }
  if (!rss || !hwm) return absl::DataLossError(absl::StrCat(path, " has no VmRSS/VmHWM"));
  return m;
}

}  // namespace diloco
