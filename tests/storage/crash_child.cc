// Helper for crash_test: writes checkpoints with sync=true in a loop, continuing from the
// store's newest, and reports each completed id (u64) on the given pipe fd. The parent kills
// it with SIGKILL at random points. A separate program rather than fork(): RocksDB's
// background threads do not survive fork, so a forked child would stall on its first flush.
//
// Usage: storage_crash_child STORE_DIR PIPE_FD
#include <unistd.h>

#include <cstdio>
#include <cstdlib>

#include "tests/storage/crash_contents.h"

int main(int argc, char** argv) {
  using namespace diloco::storage;
  if (argc != 3) return 64;
  const int fd = std::atoi(argv[2]);
  auto store = CheckpointStore::Open(argv[1], testutil::TestIdentity(), testutil::CrashOptions());
  if (!store.ok()) {
    std::fprintf(stderr, "crash child: %s\n", store.status().ToString().c_str());
    return 2;
  }
  auto latest = (*store)->LoadLatest();
  if (!latest.ok()) {
    std::fprintf(stderr, "crash child: %s\n", latest.status().ToString().c_str());
    return 3;
  }
  uint64_t next = latest->has_value() ? (*latest)->id + 1 : 1;
  for (;; ++next) {
    const testutil::Contents c = testutil::CrashContents(next);
    const std::vector<FragmentView> views = testutil::CrashViews(c);
    absl::Status s = (*store)->Write(c.id, c.rounds, c.optimizer, views, c.dedup, /*sync=*/true);
    if (!s.ok()) {
      std::fprintf(stderr, "crash child: %s\n", s.ToString().c_str());
      return 4;
    }
    if (write(fd, &next, sizeof(next)) != sizeof(next)) return 5;
  }
}
