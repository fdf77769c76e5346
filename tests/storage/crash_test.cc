// Crash consistency in the style of LevelDB's fault_injection_test: a child process writes
// synced checkpoints in a loop and reports each completed id; the parent SIGKILLs it at a
// random moment (during open and recovery, or after 1-3 reported checkpoints, in the next
// write: counting reports keeps the test's reach the same on a slow machine), reopens the
// store and checks that it holds exactly one complete checkpoint whose id is at least the
// last id reported (synced), and at most one beyond it (the write in flight), with params,
// momentum, versions, dedup and rounds all of that same id. Kept older checkpoints must be
// complete too.
//
// SIGKILL loses nothing the kernel has accepted, so this checks RocksDB's atomicity and our
// recovery, not power loss; docs/storage.md says what covers the rest.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <random>
#include <thread>

#include "gtest/gtest.h"
#include "tests/storage/crash_contents.h"

namespace diloco::storage {
namespace {

using testutil::CrashContents;
using testutil::CrashOptions;
using testutil::ExpectEqual;
using testutil::TempDir;
using testutil::TestIdentity;

struct ChildResult {
  std::vector<uint64_t> reported;
  int status = 0;
};

// Reads one reported id, waiting at most `timeout`; false when the child closed the pipe
// (it died) or the wait ran out.
bool ReadId(int fd, uint64_t* id, std::chrono::milliseconds timeout) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(timeout.count())) <= 0) return false;
  return read(fd, id, sizeof(*id)) == sizeof(*id);
}

// Starts the child, lets it report `wait_for` completed checkpoints, then lets it run for
// `delay` more (into open and recovery when wait_for is 0, into a later write otherwise) and
// kills it. Progress is bound by the child's reports, not by how fast this machine is.
ChildResult RunAndKill(const std::string& path, int wait_for, std::chrono::microseconds delay) {
  int fds[2];
  EXPECT_EQ(pipe(fds), 0);
  fcntl(fds[0], F_SETFD, FD_CLOEXEC);
  const std::string fd_arg = std::to_string(fds[1]);
  const pid_t pid = fork();
  if (pid == 0) {
    execl(CRASH_CHILD_PATH, CRASH_CHILD_PATH, path.c_str(), fd_arg.c_str(),
          static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  ChildResult r;
  uint64_t id;
  // Generous: a sanitizer build on a loaded 2-core machine writes a checkpoint in well under
  // a second; this only bounds a child that hangs.
  constexpr std::chrono::milliseconds kReportTimeout(60000);
  while (static_cast<int>(r.reported.size()) < wait_for && ReadId(fds[0], &id, kReportTimeout)) {
    r.reported.push_back(id);
  }
  std::this_thread::sleep_for(delay);
  kill(pid, SIGKILL);
  waitpid(pid, &r.status, 0);
  while (read(fds[0], &id, sizeof(id)) == sizeof(id)) r.reported.push_back(id);
  close(fds[0]);
  return r;
}

TEST(CrashTest, KilledWriterLeavesTheNewestSyncedCheckpoint) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  const uint32_t seed = std::random_device()();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  std::mt19937 rng(seed);
  uint64_t synced = 0;  // highest id any child reported
  int kills_mid_write = 0;
  constexpr int kIterations = 25;
  constexpr uint64_t kEnoughCheckpoints = 10;
  int i = 0;  // kills so far
  for (; i < kIterations; ++i) {
    // A quarter of the kills land in open, recovery or the first write; the rest after 1-3
    // completed checkpoints, somewhere in the next write (a write takes milliseconds).
    const int wait_for = i % 4 == 0 ? 0 : std::uniform_int_distribution<int>(1, 3)(rng);
    const int max_us = wait_for == 0 ? 120000 : 20000;
    const auto delay =
        std::chrono::microseconds(std::uniform_int_distribution<int>(0, max_us)(rng));
    ChildResult child = RunAndKill(path, wait_for, delay);
    ASSERT_GE(static_cast<int>(child.reported.size()), wait_for)
        << "iteration " << i << ": the child reported too few checkpoints before it died";
    ASSERT_TRUE(WIFSIGNALED(child.status))
        << "child exited on its own with " << WEXITSTATUS(child.status) << " (see stderr)";
    for (uint64_t id : child.reported) {
      ASSERT_GT(id, synced) << "ids must grow across restarts";
      synced = id;
    }
    auto store = CheckpointStore::Open(path, TestIdentity(), CrashOptions());
    ASSERT_TRUE(store.ok()) << "iteration " << i << ": " << store.status();
    auto latest = (*store)->LoadLatest();
    ASSERT_TRUE(latest.ok()) << "iteration " << i << ": " << latest.status();
    if (synced == 0) {
      if (!latest->has_value()) continue;  // killed before the first checkpoint completed
    }
    ASSERT_TRUE(latest->has_value()) << "iteration " << i << ": synced " << synced << " lost";
    const Checkpoint& got = **latest;
    ASSERT_GE(got.id, synced) << "iteration " << i << ": a synced checkpoint was lost";
    ASSERT_LE(got.id, synced + 1) << "iteration " << i;
    if (got.id == synced + 1) ++kills_mid_write;  // the in-flight write made it
    ExpectEqual(got, CrashContents(got.id));
    auto ids = (*store)->ListCheckpoints();
    ASSERT_TRUE(ids.ok());
    ASSERT_LE(ids->size(), static_cast<size_t>(CrashOptions().keep));
    ASSERT_EQ(ids->back(), got.id);
    for (uint64_t id : *ids) {
      auto c = (*store)->LoadCheckpoint(id);
      ASSERT_TRUE(c.ok()) << c.status();
      ExpectEqual(*c, CrashContents(id));
    }
    synced = got.id;  // the next child continues after what the store holds
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_GT(synced, kEnoughCheckpoints) << "too few checkpoints written to exercise anything";
  RecordProperty("checkpoints", static_cast<int>(synced));
  RecordProperty("in_flight_survived", kills_mid_write);
  std::printf("crash test: %d kills, %llu checkpoints, %d in-flight writes survived\n", i,
              static_cast<unsigned long long>(synced), kills_mid_write);
}

}  // namespace
}  // namespace diloco::storage
