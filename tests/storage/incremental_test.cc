// Incremental checkpoints: a fragment marked unchanged is not written again, the manifest names
// the older checkpoint's file for it, retention removes exactly the files no kept manifest
// names (disk use stays within keep x 8 bytes per parameter, plus the write in flight), and a
// reopened store sweeps files a crash left unnamed.
#include <filesystem>
#include <fstream>
#include <set>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "storage/tensor_file.h"
#include "tests/storage/test_util.h"

namespace diloco::storage {
namespace {

using testutil::Contents;
using testutil::ExpectEqual;
using testutil::MakeContents;
using testutil::TempDir;
using testutil::TestIdentity;
namespace fs = std::filesystem;

std::set<std::string> TensorFiles(const std::string& path) {
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(path + "/tensors"))
    names.insert(e.path().filename().string());
  return names;
}

// Contents `id` in which the fragments in `kept` are those of `base` (marked unchanged).
struct Incremental {
  Contents want;                    // what loading checkpoint `id` must give
  std::vector<FragmentView> views;  // what the writer hands over
};
Incremental Make(uint64_t id, const Contents& base, const std::set<uint32_t>& kept) {
  Incremental r;
  r.want = MakeContents(id, {0, 1, 2}, 3000);
  for (size_t i = 0; i < r.want.fragments.size(); ++i)
    if (kept.contains(r.want.fragments[i].id)) r.want.fragments[i] = base.fragments[i];
  for (const FragmentState& f : r.want.fragments) {
    FragmentView v{f.id, f.version, f.params, f.momentum};
    if (kept.contains(f.id)) v = {f.id, f.version, {}, {}, /*unchanged=*/true};
    r.views.push_back(v);
  }
  return r;
}

absl::Status Write(CheckpointStore& s, const Incremental& c, bool sync = true) {
  return s.Write(c.want.id, c.want.rounds, c.want.optimizer, c.views, c.want.dedup, sync);
}

TEST(IncrementalTest, UnchangedFragmentsAreNamedNotRewritten) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  auto store = *CheckpointStore::Open(path, TestIdentity());
  const Contents first = MakeContents(1, {0, 1, 2}, 3000);
  ASSERT_TRUE(testutil::WriteContents(*store, first, true).ok());
  const Incremental second = Make(2, first, {1});
  ASSERT_TRUE(Write(*store, second).ok());
  EXPECT_EQ(TensorFiles(path),
            (std::set<std::string>{TensorFileName(0, 1), TensorFileName(1, 1), TensorFileName(2, 1),
                                   TensorFileName(0, 2), TensorFileName(2, 2)}));
  ExpectEqual(**store->LoadLatest(), second.want);
  ExpectEqual(*store->LoadCheckpoint(1), first);
  store.reset();
  auto again = *CheckpointStore::Open(path, TestIdentity());
  ExpectEqual(**again->LoadLatest(), second.want);
}

TEST(IncrementalTest, UnchangedMustBeWhatTheNewestHolds) {
  TempDir dir;
  auto store = *CheckpointStore::Open(dir.Sub("s"), TestIdentity());
  Incremental none = Make(1, MakeContents(1, {0, 1, 2}, 3000), {0});
  EXPECT_EQ(Write(*store, none).code(), absl::StatusCode::kInvalidArgument);  // empty store
  const Contents first = MakeContents(1, {0, 1, 2}, 3000);
  ASSERT_TRUE(testutil::WriteContents(*store, first).ok());
  Incremental bad = Make(2, first, {0});
  bad.views[0].version += 1;  // claims a version the store does not hold
  const absl::Status s = Write(*store, bad);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.message()), ::testing::HasSubstr("marked unchanged"));
  ExpectEqual(**store->LoadLatest(), first);  // nothing changed
}

TEST(IncrementalTest, RetentionKeepsDiskWithinKeptCheckpointsPlusOne) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  StoreOptions o;
  o.keep = 2;
  auto store = *CheckpointStore::Open(path, TestIdentity(), o);
  Contents base = MakeContents(1, {0, 1, 2}, 3000);
  ASSERT_TRUE(testutil::WriteContents(*store, base).ok());
  uint64_t numel = 0;
  for (const auto& f : base.fragments) numel += f.params.size();
  std::vector<Incremental> written;
  for (uint64_t id = 2; id <= 20; ++id) {
    // Fragment id % 3 changes; the others keep what the newest holds.
    std::set<uint32_t> kept = {0, 1, 2};
    kept.erase(static_cast<uint32_t>(id % 3));
    written.push_back(Make(id, base, kept));
    ASSERT_TRUE(Write(*store, written.back(), id % 2 == 0).ok()) << id;
    base = written.back().want;
    // Every file on disk is named by a kept manifest: at most keep per fragment.
    uint64_t bytes = 0;
    for (const auto& e : fs::directory_iterator(path + "/tensors")) bytes += e.file_size();
    EXPECT_LE(bytes, o.keep * (8 * numel + 3 * 48)) << "after checkpoint " << id;
    EXPECT_LE(store->ApproximateSizeBytes(), (o.keep + 1) * 8 * numel + (1 << 20));
  }
  EXPECT_THAT(*store->ListCheckpoints(), ::testing::ElementsAre(19, 20));
  ExpectEqual(*store->LoadCheckpoint(19), written[written.size() - 2].want);
  ExpectEqual(**store->LoadLatest(), written.back().want);
}

TEST(IncrementalTest, OpenSweepsFilesNoManifestNames) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  const Contents first = MakeContents(1, {0, 1}, 100);
  {
    auto store = *CheckpointStore::Open(path, TestIdentity());
    ASSERT_TRUE(testutil::WriteContents(*store, first).ok());
  }
  // What a crash between the tensor files and the manifest leaves.
  std::ofstream(path + "/tensors/" + TensorFileName(0, 2)) << "cut";
  std::ofstream(path + "/tensors/" + TensorFileName(1, 2) + ".tmp") << "cut";
  std::ofstream(path + "/tensors/notes.txt") << "an operator's file";
  auto store = *CheckpointStore::Open(path, TestIdentity());
  EXPECT_EQ(TensorFiles(path),
            (std::set<std::string>{TensorFileName(0, 1), TensorFileName(1, 1), "notes.txt"}));
  ExpectEqual(**store->LoadLatest(), first);
}

TEST(IncrementalTest, VersionZeroWritesNoFileAndLoadsZeros) {
  TempDir dir;
  const std::string path = dir.Sub("s");
  auto store = *CheckpointStore::Open(path, TestIdentity());
  Contents c = MakeContents(1, {0, 1}, 100);
  c.fragments[1].version = 0;
  std::fill(c.fragments[1].params.begin(), c.fragments[1].params.end(), 0.0f);
  std::fill(c.fragments[1].momentum.begin(), c.fragments[1].momentum.end(), 0.0f);
  ASSERT_TRUE(testutil::WriteContents(*store, c).ok());
  EXPECT_EQ(TensorFiles(path), (std::set<std::string>{TensorFileName(0, 1)}));
  ExpectEqual(**store->LoadLatest(), c);
}

}  // namespace
}  // namespace diloco::storage
