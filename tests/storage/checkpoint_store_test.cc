// CheckpointStore behaviour through its public API: round trips, retention, reopen, identity
// and path checks. Corruption cases live in corruption_test.cc, crashes in crash_test.cc.
#include "storage/checkpoint_store.h"

#include <filesystem>
#include <fstream>

#include "absl/strings/str_format.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/storage/test_util.h"

namespace diloco::storage {
namespace {

using ::testing::HasSubstr;
using testutil::Contents;
using testutil::ExpectEqual;
using testutil::MakeContents;
using testutil::TempDir;
using testutil::TestIdentity;
using testutil::WriteContents;

std::unique_ptr<CheckpointStore> MustOpen(const std::string& path, StoreOptions o = {},
                                          StoreIdentity id = TestIdentity()) {
  absl::StatusOr<std::unique_ptr<CheckpointStore>> s = CheckpointStore::Open(path, id, o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

TEST(CheckpointStoreTest, EmptyStoreLoadsNothing) {
  TempDir dir;
  auto store = MustOpen(dir.Sub("s"));
  ASSERT_NE(store, nullptr);
  auto latest = store->LoadLatest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  EXPECT_FALSE(latest->has_value());
  EXPECT_THAT(*store->ListCheckpoints(), ::testing::IsEmpty());
  EXPECT_EQ(store->identity().plan_fingerprint, TestIdentity().plan_fingerprint);
}

TEST(CheckpointStoreTest, RoundTripsSeveralCheckpoints) {
  TempDir dir;
  StoreOptions o;
  o.keep = 5;
  auto store = MustOpen(dir.Sub("s"), o);
  ASSERT_NE(store, nullptr);
  std::vector<Contents> written;
  for (uint64_t id : {3, 4, 9}) {
    written.push_back(MakeContents(id, {0, 2, 5}, 1000 + id, static_cast<int>(id % 4)));
    ASSERT_TRUE(WriteContents(*store, written.back(), /*sync=*/id % 2 == 0).ok());
  }
  auto latest = store->LoadLatest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  ASSERT_TRUE(latest->has_value());
  ExpectEqual(**latest, written.back());
  for (const Contents& c : written) {
    auto got = store->LoadCheckpoint(c.id);
    ASSERT_TRUE(got.ok()) << got.status();
    ExpectEqual(*got, c);
  }
  EXPECT_THAT(*store->ListCheckpoints(), ::testing::ElementsAre(3, 4, 9));
  EXPECT_EQ(store->LoadCheckpoint(5).status().code(), absl::StatusCode::kNotFound);
}

TEST(CheckpointStoreTest, EmptyFragmentsAndDedupRoundTrip) {
  TempDir dir;
  auto store = MustOpen(dir.Sub("s"));
  Contents c = MakeContents(1, {}, 0, 0);
  ASSERT_TRUE(WriteContents(*store, c).ok());
  Contents d = MakeContents(2, {7}, 0, 0);  // a fragment with one element (numel 0 + id 7)
  d.fragments[0].params.clear();
  d.fragments[0].momentum.clear();
  ASSERT_TRUE(WriteContents(*store, d).ok());
  auto latest = store->LoadLatest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  ExpectEqual(**latest, d);
}

TEST(CheckpointStoreTest, TensorsAreFilesOfTheirOwn) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  Contents c = MakeContents(1, {0, 1}, 100000);
  {
    auto store = MustOpen(path);
    ASSERT_TRUE(WriteContents(*store, c, true).ok());
  }
  auto store = MustOpen(path);
  ExpectEqual(**store->LoadLatest(), c);
  int files = 0;
  uint64_t bytes = 0;
  for (const auto& e : std::filesystem::directory_iterator(path + "/tensors")) {
    ++files;
    bytes += e.file_size();
  }
  EXPECT_EQ(files, 2);
  EXPECT_EQ(bytes, (2 * 100000 + 1) * 8 + 2 * (40 + 8));  // params + momentum + header/trailer
  EXPECT_GE(store->ApproximateSizeBytes(), bytes);
}

TEST(CheckpointStoreTest, RetentionKeepsTheNewest) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  StoreOptions o;
  o.keep = 2;
  {
    auto store = MustOpen(path, o);
    for (uint64_t id = 1; id <= 6; ++id)
      ASSERT_TRUE(WriteContents(*store, MakeContents(id, {0, 1}, 5000)).ok());
    EXPECT_THAT(*store->ListCheckpoints(), ::testing::ElementsAre(5, 6));
    EXPECT_EQ(store->LoadCheckpoint(4).status().code(), absl::StatusCode::kNotFound);
    ExpectEqual(*store->LoadCheckpoint(5), MakeContents(5, {0, 1}, 5000));
  }
  auto store = MustOpen(path, o);
  EXPECT_THAT(*store->ListCheckpoints(), ::testing::ElementsAre(5, 6));
  ExpectEqual(**store->LoadLatest(), MakeContents(6, {0, 1}, 5000));
  ASSERT_TRUE(WriteContents(*store, MakeContents(7, {0, 1}, 5000)).ok());
  EXPECT_THAT(*store->ListCheckpoints(), ::testing::ElementsAre(6, 7));
}

TEST(CheckpointStoreTest, ReopenRecoversTheNewest) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  {
    auto store = MustOpen(path);
    for (uint64_t id = 10; id < 13; ++id)
      ASSERT_TRUE(WriteContents(*store, MakeContents(id, {1, 3}, 2000), false).ok());
  }
  auto store = MustOpen(path);
  auto latest = store->LoadLatest();
  ASSERT_TRUE(latest.ok()) << latest.status();
  ExpectEqual(**latest, MakeContents(12, {1, 3}, 2000));
  EXPECT_EQ(store->Write(12, 0, {}, {}, {}, false).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CheckpointStoreTest, RefusesNonIncreasingIdsAndBadInput) {
  TempDir dir;
  auto store = MustOpen(dir.Sub("s"));
  ASSERT_TRUE(WriteContents(*store, MakeContents(5, {0}, 10)).ok());
  EXPECT_EQ(WriteContents(*store, MakeContents(5, {0}, 10)).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(WriteContents(*store, MakeContents(4, {0}, 10)).code(),
            absl::StatusCode::kInvalidArgument);
  Contents bad = MakeContents(6, {0}, 10);
  bad.fragments[0].momentum.pop_back();
  EXPECT_EQ(WriteContents(*store, bad).code(), absl::StatusCode::kInvalidArgument);
  Contents twice = MakeContents(6, {1, 1}, 10);
  EXPECT_EQ(WriteContents(*store, twice).code(), absl::StatusCode::kInvalidArgument);
  Contents dup = MakeContents(6, {0}, 10);
  dup.dedup.push_back(dup.dedup[0]);
  EXPECT_EQ(WriteContents(*store, dup).code(), absl::StatusCode::kInvalidArgument);
  ExpectEqual(**store->LoadLatest(), MakeContents(5, {0}, 10));
  EXPECT_EQ(
      CheckpointStore::Open(dir.Sub("t"), TestIdentity(), StoreOptions{.keep = 0}).status().code(),
      absl::StatusCode::kInvalidArgument);
}

TEST(CheckpointStoreTest, ForeignIdentityIsRefusedAndStoreUnchanged) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  const Contents c = MakeContents(8, {0, 4}, 300);
  {
    auto store = MustOpen(path);
    ASSERT_TRUE(WriteContents(*store, c, true).ok());
  }
  std::vector<StoreIdentity> others(4, TestIdentity());
  others[0].plan_fingerprint ^= 1;
  others[1].model_fingerprint ^= 1;
  others[2].shard = 1;
  others[3].num_shards = 3;
  for (const StoreIdentity& other : others) {
    auto s = CheckpointStore::Open(path, other);
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
    EXPECT_THAT(std::string(s.status().message()), HasSubstr("1234abcd5678ef01"));
    EXPECT_THAT(std::string(s.status().message()),
                HasSubstr(absl::StrFormat("%016x", other.plan_fingerprint)));
  }
  auto store = MustOpen(path);
  ExpectEqual(**store->LoadLatest(), c);
}

TEST(CheckpointStoreTest, OpenForReadSeesIdentityAndRefusesWrites) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  const Contents c = MakeContents(2, {0}, 64);
  {
    auto store = MustOpen(path, {}, TestIdentity(1));
    ASSERT_TRUE(WriteContents(*store, c).ok());
  }
  auto ro = CheckpointStore::OpenForRead(path);
  ASSERT_TRUE(ro.ok()) << ro.status();
  EXPECT_EQ((*ro)->identity().shard, 1u);
  ExpectEqual(**(*ro)->LoadLatest(), c);
  EXPECT_EQ(WriteContents(**ro, MakeContents(3, {0}, 64)).code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CheckpointStore::OpenForRead(dir.Sub("missing")).status().code(),
            absl::StatusCode::kNotFound);
}

TEST(CheckpointStoreTest, SecondOpenOfALiveStoreIsRefused) {
  TempDir dir;
  auto store = MustOpen(dir.Sub("s"));
  auto again = CheckpointStore::Open(dir.Sub("s"), TestIdentity());
  EXPECT_EQ(again.status().code(), absl::StatusCode::kFailedPrecondition) << again.status();
}

TEST(CheckpointStoreTest, RefusesARegularFile) {
  TempDir dir;
  const std::string file = dir.Sub("f");
  std::ofstream(file) << "hello";
  auto s = CheckpointStore::Open(file, TestIdentity());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("not a directory"));
  EXPECT_FALSE(CheckpointStore::OpenForRead(file).ok());
}

TEST(CheckpointStoreTest, RefusesADirectoryWithOtherFiles) {
  TempDir dir;
  std::filesystem::create_directories(dir.Sub("d"));
  std::ofstream(dir.Sub("d/notes.txt")) << "mine";
  auto s = CheckpointStore::Open(dir.Sub("d"), TestIdentity());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("notes.txt"));
  EXPECT_TRUE(std::filesystem::exists(dir.Sub("d/notes.txt")));
  EXPECT_FALSE(std::filesystem::exists(dir.Sub("d/CURRENT")));
}

TEST(CheckpointStoreTest, RefusesAGarbageCurrentFile) {
  TempDir dir;
  std::filesystem::create_directories(dir.Sub("d"));
  std::ofstream(dir.Sub("d/CURRENT")) << "garbage\n";
  auto s = CheckpointStore::Open(dir.Sub("d"), TestIdentity());
  EXPECT_FALSE(s.ok());
  auto r = CheckpointStore::OpenForRead(dir.Sub("d"));
  EXPECT_FALSE(r.ok());
}

TEST(CheckpointStoreTest, EmptyExistingDirectoryBecomesAStore) {
  TempDir dir;
  std::filesystem::create_directories(dir.Sub("d"));
  auto store = MustOpen(dir.Sub("d") + "/");
  ASSERT_NE(store, nullptr);
  ASSERT_TRUE(WriteContents(*store, MakeContents(1, {0}, 8)).ok());
}

}  // namespace
}  // namespace diloco::storage
