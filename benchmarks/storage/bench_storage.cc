// diloco-bench-storage: checkpoint write rate against the disk's own sequential write rate.
//
// For each size (params + momentum bytes) it times CheckpointStore::Write with sync=false and
// sync=true, and, in the same run and directory, a plain sequential write(2) of the same bytes
// without and with fsync (the ceiling). It prints MB/s for each and the ratio to the ceiling.
// Several checkpoints are written per size so retention, flushes and blob files are in play.
//
// Usage: diloco-bench-storage [--dir=DIR] [--sizes_mib=64,256] [--reps=4] [--fragments=8]
#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "storage/checkpoint_store.h"

namespace {

using Clock = std::chrono::steady_clock;
using diloco::storage::CheckpointStore;
using diloco::storage::FragmentView;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Sequential write of `bytes` from `buf` (reused, pre-touched) into a fresh file.
double PlainFileWrite(const std::string& path, const std::vector<float>& buf, uint64_t bytes,
                      bool fsync_it) {
  const auto t0 = Clock::now();
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) std::abort();
  const char* p = reinterpret_cast<const char*>(buf.data());
  uint64_t left = bytes;
  while (left > 0) {
    const uint64_t chunk = std::min<uint64_t>(left, buf.size() * sizeof(float));
    if (::write(fd, p, chunk) != static_cast<ssize_t>(chunk)) std::abort();
    left -= chunk;
  }
  if (fsync_it) ::fsync(fd);
  ::close(fd);
  const double s = Seconds(t0, Clock::now());
  ::unlink(path.c_str());
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  std::string dir = "/tmp/diloco-bench-storage";
  std::vector<uint64_t> sizes_mib = {64, 256};
  int reps = 4;
  uint32_t fragments = 8;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.starts_with("--dir=")) {
      dir = a.substr(6);
    } else if (a.starts_with("--sizes_mib=")) {
      sizes_mib.clear();
      for (absl::string_view s : absl::StrSplit(a.substr(12), ',')) {
        uint64_t v;
        if (!absl::SimpleAtoi(s, &v)) return 2;
        sizes_mib.push_back(v);
      }
    } else if (a.starts_with("--reps=")) {
      reps = std::atoi(a.c_str() + 7);
    } else if (a.starts_with("--fragments=")) {
      fragments = static_cast<uint32_t>(std::atoi(a.c_str() + 12));
    } else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::printf("dir %s, %d checkpoints per mode, %u fragments, MB = 1e6 bytes\n", dir.c_str(), reps,
              fragments);
  std::printf("%10s %-26s %10s %10s %8s\n", "MiB", "mode", "MB/s", "ceil MB/s", "ratio");
  for (uint64_t mib : sizes_mib) {
    const uint64_t bytes = mib << 20;  // params + momentum
    const uint64_t per_frag = bytes / 2 / sizeof(float) / fragments;
    std::vector<std::vector<float>> params(fragments), momentum(fragments);
    for (uint32_t f = 0; f < fragments; ++f) {
      params[f].assign(per_frag, 0.001f * f);
      momentum[f].assign(per_frag, -0.002f * f);
      for (uint64_t i = 0; i < per_frag; i += 1024) params[f][i] = static_cast<float>(i);
    }
    const uint64_t real_bytes = 2 * per_frag * fragments * sizeof(float);
    for (bool sync : {false, true}) {
      const std::string path = dir + "/store-" + std::to_string(mib) + (sync ? "-sync" : "");
      auto store = CheckpointStore::Open(path, {1, 2, 0, 1});
      if (!store.ok()) {
        std::fprintf(stderr, "%s\n", store.status().ToString().c_str());
        return 1;
      }
      double total = 0, ceiling = 0;
      for (int r = 0; r < reps; ++r) {
        std::vector<FragmentView> views;
        for (uint32_t f = 0; f < fragments; ++f) {
          params[f][1] = static_cast<float>(r);  // every checkpoint differs
          views.push_back({f, static_cast<uint64_t>(r), params[f], momentum[f]});
        }
        const auto t0 = Clock::now();
        absl::Status s = (*store)->Write(r + 1, r, {}, views, {}, sync);
        total += Seconds(t0, Clock::now());
        if (!s.ok()) {
          std::fprintf(stderr, "%s\n", s.ToString().c_str());
          return 1;
        }
        ceiling += PlainFileWrite(dir + "/plain", params[0], real_bytes, sync);
      }
      const double mbps = reps * real_bytes / total / 1e6;
      const double ceil_mbps = reps * real_bytes / ceiling / 1e6;
      std::printf("%10llu %-26s %10.0f %10.0f %8.2f\n", static_cast<unsigned long long>(mib),
                  sync ? "checkpoint sync" : "checkpoint no-sync", mbps, ceil_mbps,
                  mbps / ceil_mbps);
      std::printf("%10s %-26s %10llu bytes on disk after %d checkpoints (keep 3)\n", "", "",
                  static_cast<unsigned long long>((*store)->ApproximateSizeBytes()), reps);
      store->reset();
      std::filesystem::remove_all(path);
    }
  }
  std::filesystem::remove_all(dir);
  return 0;
}
