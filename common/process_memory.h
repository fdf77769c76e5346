// Resident memory of a process, from /proc/PID/status: VmRSS (now) and VmHWM (peak). The shard
// reports its own in Stats, the worker its own in its events, and benchmarks and tests read a
// server's by PID, so bytes per parameter are measured, not estimated.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "absl/status/statusor.h"

namespace diloco {

struct ProcessMemory {
  uint64_t resident_bytes = 0;       // VmRSS
  uint64_t peak_resident_bytes = 0;  // VmHWM
};

// pid 0: this process.
absl::StatusOr<ProcessMemory> ReadProcessMemory(pid_t pid = 0);

}  // namespace diloco
