// A full disk: checkpoints go to a small tmpfs until a write fails. The failed write must
// report ResourceExhausted and leave the previous checkpoint the newest; once space is freed
// the next write must succeed (RocksDB stays read-only after ENOSPC until Resume()), and a
// reopened store must hold it. Mounting needs root (CAP_SYS_ADMIN): skipped where refused.
#include <sys/statvfs.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "gtest/gtest.h"
#include "tests/storage/test_util.h"
#include "tests/util/tmpfs.h"

namespace diloco::storage {
namespace {

using testutil::Contents;
using testutil::ExpectEqual;
using testutil::MakeContents;
using testutil::TempDir;
using testutil::TestIdentity;
using testutil::WriteContents;

Contents Sized(uint64_t id) { return MakeContents(id, {0, 1}, 40000 + 20000 * id); }

TEST(DiskFullTest, FailedWriteKeepsThePreviousAndWritingResumesAfterSpaceIsFreed) {
  TempDir dir;
  diloco::testing::Tmpfs mnt(dir.Sub("mnt"), "8m");
  if (!mnt.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here: " << mnt.error();
  const std::string ballast = dir.Sub("mnt/ballast");
  {
    std::ofstream f(ballast, std::ios::binary);
    const std::string mib(1 << 20, 'x');
    for (int i = 0; i < 3; ++i) f << mib;
  }
  const std::string path = dir.Sub("mnt/store");
  StoreOptions o;
  o.keep = 1;
  o.memtable_bytes = 1 << 20;
  auto store = CheckpointStore::Open(path, TestIdentity(), o);
  ASSERT_TRUE(store.ok()) << store.status();

  uint64_t id = 1, last_ok = 0;
  absl::Status failure;
  // Retention frees the older checkpoint's files, so checkpoints grow (0.3 MB + 0.16 MB per
  // id) until one does not fit beside its predecessor.
  for (; id < 200; ++id) {
    absl::Status s = WriteContents(**store, Sized(id), /*sync=*/true);
    if (!s.ok()) {
      failure = s;
      break;
    }
    last_ok = id;
  }
  ASSERT_FALSE(failure.ok()) << "the disk never filled";
  ASSERT_GT(last_ok, 0u) << failure;
  EXPECT_EQ(failure.code(), absl::StatusCode::kResourceExhausted) << failure;
  auto latest = (*store)->LoadLatest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  ExpectEqual(**latest, Sized(last_ok));

  // The next write reopens the database (replaying and flushing the old WAL, which may free
  // space): it succeeds or fails cleanly, and the store stays readable and consistent.
  absl::Status again = WriteContents(**store, Sized(id + 1), true);
  if (again.ok()) last_ok = id + 1;
  latest = (*store)->LoadLatest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  ExpectEqual(**latest, Sized(last_ok));

  // RocksDB's own recovery polls free space every few seconds; a write meanwhile fails with
  // ResourceExhausted or Unavailable and is retried, as the server would at its next interval.
  std::filesystem::remove(ballast);
  uint64_t next = id + 2;
  absl::Status s;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  for (; std::chrono::steady_clock::now() < give_up; ++next) {
    s = WriteContents(**store, Sized(next), true);
    if (s.ok()) break;
    EXPECT_TRUE(s.code() == absl::StatusCode::kResourceExhausted ||
                s.code() == absl::StatusCode::kUnavailable)
        << s;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_TRUE(s.ok()) << "writing did not resume after space was freed: " << s;
  ExpectEqual(**(*store)->LoadLatest(), Sized(next));
  store->reset();
  auto reopened = CheckpointStore::Open(path, TestIdentity(), o);
  ASSERT_TRUE(reopened.ok()) << reopened.status();
  ExpectEqual(**(*reopened)->LoadLatest(), Sized(next));
}

// Per-round durability on a small disk: a checkpoint per closed round for a long run of the
// tiny model (4 fragments of 30k values, one changing per round, 3 workers' dedup entries),
// long enough for RocksDB's memtable to fill and switch, and its WAL to roll, several times.
// Nothing is flushed by a test hook: the default options must keep the store within a disk
// that holds its kept checkpoints a few times over.
TEST(DiskFullTest, PerRoundCheckpointsOfTheTinyModelRunOnAnEightMiBDisk) {
  TempDir dir;
  diloco::testing::Tmpfs mnt(dir.Sub("mnt"), "8m");
  if (!mnt.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here: " << mnt.error();
  const std::string path = dir.Sub("mnt/store");
  auto store = CheckpointStore::Open(path, TestIdentity(), StoreOptions{});
  ASSERT_TRUE(store.ok()) << store.status();
  constexpr uint32_t kFragments = 4, kWorkers = 3;
  constexpr size_t kNumel = 30144;  // the tiny model's 120576 parameters over 4 fragments
  std::vector<std::vector<float>> theta(kFragments, std::vector<float>(kNumel, 0.5f));
  std::vector<std::vector<float>> momentum(kFragments, std::vector<float>(kNumel, 0.0f));
  std::vector<uint64_t> version(kFragments, 1);
  uint64_t wal_rolls = 0, last_wal = 0, peak_used = 0;
  for (uint64_t id = 1; id <= 5000; ++id) {
    const uint32_t changed = static_cast<uint32_t>(id % kFragments);
    ++version[changed];
    theta[changed][id % kNumel] += 1.0f;
    std::vector<FragmentView> views;
    for (uint32_t f = 0; f < kFragments; ++f) {
      if (f == changed || id <= kFragments)  // the first checkpoints write every fragment
        views.push_back({f, version[f], theta[f], momentum[f]});
      else
        views.push_back({f, version[f], {}, {}, /*unchanged=*/true});
    }
    std::vector<DedupEntry> dedup;
    for (uint32_t w = 0; w < kWorkers; ++w)
      for (uint32_t f = 0; f < kFragments; ++f) dedup.push_back({w, f, 7, id});
    absl::Status s = (*store)->Write(id, id, {}, views, dedup, /*sync=*/true);
    ASSERT_TRUE(s.ok()) << "checkpoint " << id << ": " << s;
    struct statvfs fs_stat;
    if (statvfs(path.c_str(), &fs_stat) == 0)
      peak_used =
          std::max<uint64_t>(peak_used, (fs_stat.f_blocks - fs_stat.f_bfree) * fs_stat.f_frsize);
    for (const auto& e : std::filesystem::directory_iterator(path)) {
      const std::string name = e.path().filename().string();
      if (!name.ends_with(".log")) continue;
      const uint64_t number = std::stoull(name);
      if (number > last_wal) {
        wal_rolls += last_wal != 0;
        last_wal = number;
      }
    }
  }
  EXPECT_GE(wal_rolls, 2u) << "the run never switched memtables: it tests less than it says";
  std::printf("peak disk use %.2f MiB, %lu WAL rolls\n", peak_used / 1048576.0,
              static_cast<unsigned long>(wal_rolls));
  auto latest = (*store)->LoadLatest();
  ASSERT_TRUE(latest.ok() && latest->has_value()) << latest.status();
  EXPECT_EQ((*latest)->id, 5000u);
}

}  // namespace
}  // namespace diloco::storage
