// A catalogue of on-disk damage, one short test each (in the spirit of LevelDB's log_test):
// every case is written through a raw RocksDB handle, into a tensor file or into RocksDB's
// write-ahead log of a closed store, and the store must answer DataLoss or FailedPrecondition,
// never garbage, an older checkpoint or a crash; a refused open changes no byte of the store.
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "storage/checkpoint_store.h"
#include "storage/record_format.h"
#include "storage/tensor_file.h"
#include "tests/storage/test_util.h"

namespace diloco::storage {
namespace {

using ::testing::HasSubstr;
using testutil::DirectoryContents;
using testutil::MakeContents;
using testutil::ReadAll;
using testutil::TempDir;
using testutil::TestIdentity;
using testutil::WriteContents;
namespace format = storage::format;

enum Cf { kDefault, kMeta, kDedup };

// Opens the store's RocksDB directly and hands `edit` the DB and its column families.
void RawEdit(
    const std::string& path,
    const std::function<void(rocksdb::DB*, std::vector<rocksdb::ColumnFamilyHandle*>&)>& edit) {
  std::vector<rocksdb::ColumnFamilyDescriptor> descs;
  for (const char* n : {"default", format::kMetaCf, format::kDedupCf})
    descs.emplace_back(n, rocksdb::ColumnFamilyOptions());
  std::vector<rocksdb::ColumnFamilyHandle*> cfs;
  rocksdb::DB* db = nullptr;
  rocksdb::Status s = rocksdb::DB::Open(rocksdb::DBOptions(), path, descs, &cfs, &db);
  ASSERT_TRUE(s.ok()) << s.ToString();
  edit(db, cfs);
  for (auto* h : cfs) ASSERT_TRUE(db->DestroyColumnFamilyHandle(h).ok());
  ASSERT_TRUE(db->Close().ok());
  delete db;
}

std::string Get(rocksdb::DB* db, rocksdb::ColumnFamilyHandle* cf, const std::string& key) {
  std::string v;
  EXPECT_TRUE(db->Get(rocksdb::ReadOptions(), cf, key, &v).ok()) << "missing key";
  return v;
}

// Open and OpenForRead + LoadLatest answer `code` (with `why` in the message); a refused Open
// leaves every byte of the store as it was.
void ExpectRefused(const std::string& path, absl::StatusCode code, const std::string& why = "") {
  const auto before = DirectoryContents(path);
  auto store = CheckpointStore::Open(path, TestIdentity());
  if (code == absl::StatusCode::kOk) {
    ASSERT_TRUE(store.ok()) << store.status();
    auto latest = (*store)->LoadLatest();
    EXPECT_TRUE(latest.ok()) << latest.status();
    return;
  }
  EXPECT_EQ(store.status().code(), code) << store.status();
  EXPECT_THAT(std::string(store.status().message()), HasSubstr(why));
  EXPECT_TRUE(DirectoryContents(path) == before) << "a refused open changed the store";
  auto ro = CheckpointStore::OpenForRead(path);
  const absl::Status st = ro.ok() ? (*ro)->LoadLatest().status() : ro.status();
  EXPECT_EQ(st.code(), code) << st;
}

class CorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.Sub("s");
    auto store = CheckpointStore::Open(path_, TestIdentity());
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE(WriteContents(**store, MakeContents(1, {0, 1}, 3000)).ok());
    ASSERT_TRUE(WriteContents(**store, MakeContents(2, {0, 1}, 3000), true).ok());
  }

  // Applies `edit`, then expects the store to be refused with `code` (ExpectRefused).
  void ExpectLoadFails(
      const std::function<void(rocksdb::DB*, std::vector<rocksdb::ColumnFamilyHandle*>&)>& edit,
      absl::StatusCode code = absl::StatusCode::kDataLoss) {
    RawEdit(path_, edit);
    ExpectRefused(path_, code);
  }

  // Applies `edit` to the bytes of fragment `frag`'s tensor file of checkpoint `holder`.
  void ExpectFileLoadFails(uint32_t frag, uint64_t holder,
                           const std::function<void(std::string&)>& edit) {
    const std::string file = path_ + "/tensors/" + TensorFileName(frag, holder);
    ASSERT_TRUE(std::filesystem::exists(file)) << file;
    std::string bytes = ReadAll(file);
    edit(bytes);
    std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
    ExpectLoadFails([](auto*, auto&) {});
  }

  TempDir dir_;
  std::string path_;
};

TEST_F(CorruptionTest, UntouchedStoreLoads) {
  ExpectLoadFails([](auto*, auto&) {}, absl::StatusCode::kOk);
}

TEST_F(CorruptionTest, FlippedParamsByte) {
  ExpectFileLoadFails(1, 2, [](std::string& b) { b[kTensorHeaderBytes + 100] ^= 0x10; });
}

TEST_F(CorruptionTest, FlippedMomentumByte) {
  ExpectFileLoadFails(0, 2, [](std::string& b) { b[b.size() - 100] ^= 0x01; });
}

TEST_F(CorruptionTest, FlippedHeaderByte) {
  ExpectFileLoadFails(0, 2, [](std::string& b) { b[20] ^= 0x01; });  // the version
}

TEST_F(CorruptionTest, TruncatedTensorFile) {
  ExpectFileLoadFails(0, 2, [](std::string& b) { b.resize(b.size() - 4); });
}

TEST_F(CorruptionTest, ShortTensorFile) {
  ExpectFileLoadFails(0, 2, [](std::string& b) { b = "x"; });
}

TEST_F(CorruptionTest, TensorFileOfAnotherCheckpoint) {
  // A file that is internally valid but belongs to fragment 0 of the older checkpoint: its
  // header names another checkpoint and version, so the swap is caught.
  std::filesystem::copy_file(path_ + "/tensors/" + TensorFileName(0, 1),
                             path_ + "/tensors/" + TensorFileName(0, 2),
                             std::filesystem::copy_options::overwrite_existing);
  ExpectLoadFails([](auto*, auto&) {});
}

TEST_F(CorruptionTest, WellFormedTensorFileOfAnotherLength) {
  // A valid file (checksum and labels right) holding fewer values than the manifest says.
  std::vector<float> p(10, 1.0f), m(10, 2.0f);
  const uint64_t version = MakeContents(2, {0, 1}, 3000).fragments[0].version;
  ASSERT_TRUE(WriteTensorFile(path_ + "/tensors", {0, 2, version, 10}, p, m).ok());
  ExpectLoadFails([](auto*, auto&) {});
}

TEST_F(CorruptionTest, MissingTensorFile) {
  std::filesystem::remove(path_ + "/tensors/" + TensorFileName(1, 2));
  ExpectLoadFails([](auto*, auto&) {});
}

TEST_F(CorruptionTest, ManifestNamingAnOlderFile) {
  // A valid manifest (checksum right) whose fragment 0 points at checkpoint 1's file, which
  // holds another version: the file's header disagrees with the manifest.
  ExpectLoadFails([](rocksdb::DB* db, auto& cfs) {
    const std::string key = format::MetaKey(format::MetaTag::kCheckpoint, 2);
    auto rec = format::DecodeCheckpointRecord(key, Get(db, cfs[kMeta], key));
    ASSERT_TRUE(rec.ok()) << rec.status();
    rec->fragments[0].holder = 1;
    ASSERT_TRUE(
        db->Put(rocksdb::WriteOptions(), cfs[kMeta], key, format::EncodeCheckpointRecord(key, *rec))
            .ok());
  });
}

TEST_F(CorruptionTest, MissingDedupEntry) {
  ExpectLoadFails([](rocksdb::DB* db, auto& cfs) {
    ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), cfs[kDedup], format::DedupKey(2, 1, 0)).ok());
  });
}

TEST_F(CorruptionTest, FlippedDedupValue) {
  ExpectLoadFails([](rocksdb::DB* db, auto& cfs) {
    const std::string key = format::DedupKey(2, 1, 1);
    std::string v = Get(db, cfs[kDedup], key);
    v[0] ^= 1;
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), cfs[kDedup], key, v).ok());
  });
}

TEST_F(CorruptionTest, FlippedCheckpointRecord) {
  ExpectLoadFails([](rocksdb::DB* db, auto& cfs) {
    const std::string key = format::MetaKey(format::MetaTag::kCheckpoint, 2);
    std::string v = Get(db, cfs[kMeta], key);
    v[3] ^= 0x40;
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), cfs[kMeta], key, v).ok());
  });
}

TEST_F(CorruptionTest, LatestPointerDisagreesWithRecords) {
  ExpectLoadFails([](rocksdb::DB* db, auto& cfs) {
    const std::string key = format::MetaKey(format::MetaTag::kLatest);
    ASSERT_TRUE(
        db->Put(rocksdb::WriteOptions(), cfs[kMeta], key, format::EncodeU64Record(key, 1)).ok());
  });
}

TEST_F(CorruptionTest, LatestPointerGone) {
  ExpectLoadFails([](rocksdb::DB* db, auto& cfs) {
    const std::string key = format::MetaKey(format::MetaTag::kLatest);
    ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), cfs[kMeta], key).ok());
  });
}

TEST_F(CorruptionTest, OtherSchemaVersionIsRefused) {
  RawEdit(path_, [](rocksdb::DB* db, auto& cfs) {
    const std::string key = format::MetaKey(format::MetaTag::kSchema);
    ASSERT_TRUE(
        db->Put(rocksdb::WriteOptions(), cfs[kMeta], key, format::EncodeSchema(key, 99)).ok());
  });
  auto store = CheckpointStore::Open(path_, TestIdentity());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(std::string(store.status().message()), HasSubstr("schema version 99"));
  EXPECT_EQ(CheckpointStore::OpenForRead(path_).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(LegacyStoreTest, SchemaOneStoreIsRefusedByItsVersion) {
  // The layout before tensor files: params and momentum families, schema record 1.
  TempDir dir;
  const std::string path = dir.Sub("old");
  {
    rocksdb::DBOptions o;
    o.create_if_missing = true;
    o.create_missing_column_families = true;
    std::vector<rocksdb::ColumnFamilyDescriptor> descs;
    for (const char* n : {"default", "meta", "params", "momentum", "dedup"})
      descs.emplace_back(n, rocksdb::ColumnFamilyOptions());
    std::vector<rocksdb::ColumnFamilyHandle*> cfs;
    rocksdb::DB* db = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(o, path, descs, &cfs, &db).ok());
    const std::string sk = format::MetaKey(format::MetaTag::kSchema);
    const std::string ik = format::MetaKey(format::MetaTag::kIdentity);
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), cfs[1], sk, format::EncodeSchema(sk, 1)).ok());
    ASSERT_TRUE(
        db->Put(rocksdb::WriteOptions(), cfs[1], ik, format::EncodeIdentity(ik, TestIdentity()))
            .ok());
    for (auto* h : cfs) ASSERT_TRUE(db->DestroyColumnFamilyHandle(h).ok());
    ASSERT_TRUE(db->Close().ok());
    delete db;
  }
  auto store = CheckpointStore::Open(path, TestIdentity());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition) << store.status();
  EXPECT_THAT(std::string(store.status().message()),
              HasSubstr("schema version 1; this build reads version 2"));
}

TEST_F(CorruptionTest, CorruptIdentityIsDataLoss) {
  RawEdit(path_, [](rocksdb::DB* db, auto& cfs) {
    const std::string key = format::MetaKey(format::MetaTag::kIdentity);
    std::string v = Get(db, cfs[kMeta], key);
    v[0] ^= 1;
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), cfs[kMeta], key, v).ok());
  });
  EXPECT_EQ(CheckpointStore::Open(path_, TestIdentity()).status().code(),
            absl::StatusCode::kDataLoss);
}

TEST(ForeignRocksDbTest, DataWithoutSchemaIsRefused) {
  TempDir dir;
  rocksdb::Options o;
  o.create_if_missing = true;
  rocksdb::DB* db = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(o, dir.Sub("other"), &db).ok());
  ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), "k", "v").ok());
  delete db;
  auto store = CheckpointStore::Open(dir.Sub("other"), TestIdentity());
  EXPECT_EQ(store.status().code(), absl::StatusCode::kFailedPrecondition) << store.status();
  EXPECT_THAT(std::string(store.status().message()), HasSubstr("not a diloco checkpoint store"));
}

TEST(ForeignRocksDbTest, EmptyRocksDbIsAnInterruptedCreation) {
  TempDir dir;
  rocksdb::Options o;
  o.create_if_missing = true;
  rocksdb::DB* db = nullptr;
  ASSERT_TRUE(rocksdb::DB::Open(o, dir.Sub("fresh"), &db).ok());
  delete db;
  auto store = CheckpointStore::Open(dir.Sub("fresh"), TestIdentity());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE(WriteContents(**store, MakeContents(1, {0}, 4)).ok());
}

// Six checkpoints whose manifests are all still in RocksDB's write-ahead log (the store is not
// flushed on close), keep 3: tensor files of checkpoints 4-6 remain. Each case damages a fresh
// copy's log as a failing disk or a careless operator might.
class WalDamageTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kNewest = 6;
  void SetUp() override {
    pristine_ = dir_.Sub("pristine");
    auto store = CheckpointStore::Open(pristine_, TestIdentity());
    ASSERT_TRUE(store.ok()) << store.status();
    for (uint64_t id = 1; id <= kNewest; ++id)
      ASSERT_TRUE(WriteContents(**store, MakeContents(id, {0, 1}, 300), true).ok());
  }

  // A fresh copy of the pristine store; `*wal` is its write-ahead log (the one .log file).
  std::string Copy(std::string* wal) {
    const std::string path = dir_.Sub("copy" + std::to_string(++copies_));
    std::filesystem::copy(pristine_, path, std::filesystem::copy_options::recursive);
    std::vector<std::string> logs;
    for (const auto& e : std::filesystem::directory_iterator(path))
      if (e.path().extension() == ".log") logs.push_back(e.path().string());
    EXPECT_EQ(logs.size(), 1u) << "expected one write-ahead log in " << path;
    if (!logs.empty()) *wal = logs[0];
    return path;
  }

  // The newest checkpoint the store recovers when the loss is accepted (0: none).
  static uint64_t RecoveredWithRollback(const std::string& path, std::string* rollback) {
    StoreOptions o;
    o.accept_rollback = true;
    auto ro = CheckpointStore::OpenForRead(path, o);
    if (!ro.ok()) return 0;
    *rollback = (*ro)->rollback();
    auto ids = (*ro)->ListCheckpoints();
    return ids.ok() && !ids->empty() ? ids->back() : 0;
  }

  TempDir dir_;
  std::string pristine_;
  int copies_ = 0;
};

TEST_F(WalDamageTest, UndamagedCopyLoadsTheNewest) {
  std::string wal;
  const std::string path = Copy(&wal);
  auto store = CheckpointStore::Open(path, TestIdentity());
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_TRUE((*store)->rollback().empty());
  auto latest = (*store)->LoadLatest();
  ASSERT_TRUE(latest.ok() && latest->has_value()) << latest.status();
  testutil::ExpectEqual(**latest, MakeContents(kNewest, {0, 1}, 300));
}

TEST_F(WalDamageTest, BytesOverwrittenMidLogRefuseTheStartUntilAccepted) {
  std::string wal;
  const std::string path = Copy(&wal);
  std::string bytes = ReadAll(wal);
  ASSERT_GT(bytes.size(), 1000u);
  // Inside checkpoint 5's batch, whose files (and 4's) are still kept: the damage is not at
  // the tail (checkpoint 6's batch follows), where a crash could have left it.
  const size_t at = bytes.size() * 3 / 4;
  for (size_t i = 0; i < 64; ++i) bytes[at + i] ^= 0x5a;
  std::ofstream(wal, std::ios::binary | std::ios::trunc) << bytes;
  ExpectRefused(path, absl::StatusCode::kDataLoss, "write-ahead log");
  // Accepted: the store opens at the newest checkpoint before the damage, says what was lost,
  // and that checkpoint loads.
  StoreOptions o;
  o.accept_rollback = true;
  auto store = CheckpointStore::Open(path, TestIdentity(), o);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_THAT((*store)->rollback(), HasSubstr("damaged before its end"));
  auto latest = (*store)->LoadLatest();
  ASSERT_TRUE(latest.ok() && latest->has_value()) << latest.status();
  EXPECT_LT((*latest)->id, kNewest);
  testutil::ExpectEqual(**latest, MakeContents((*latest)->id, {0, 1}, 300));
}

TEST_F(WalDamageTest, LogCutAtAnyOffsetNeverRollsBackSilently) {
  // Each cut loses the manifests after it. The start is refused whenever tensor files newer
  // than the recovered manifest plus one remain; a cut that loses the newest manifest alone is
  // what a crash between a checkpoint's files and its manifest leaves, and opens.
  int refused = 0;
  for (double at : {0.2, 0.35, 0.5, 0.65, 0.8, 0.95}) {
    SCOPED_TRACE(at);
    std::string wal;
    const std::string path = Copy(&wal);
    std::filesystem::resize_file(
        wal, static_cast<uintmax_t>(at * static_cast<double>(std::filesystem::file_size(wal))));
    std::string rollback;
    const uint64_t recovered = RecoveredWithRollback(path, &rollback);
    if (recovered + 1 >= kNewest) {
      EXPECT_TRUE(rollback.empty()) << rollback;
      ExpectRefused(path, absl::StatusCode::kOk);
      continue;
    }
    ++refused;
    EXPECT_THAT(rollback, HasSubstr("are lost"));
    ExpectRefused(path, absl::StatusCode::kDataLoss, "tensor files of checkpoint 6 exist");
  }
  EXPECT_GE(refused, 4) << "most cuts lose more than the newest manifest";
}

TEST_F(WalDamageTest, DeletedLogRefusesTheStartUntilAccepted) {
  std::string wal;
  const std::string path = Copy(&wal);
  std::filesystem::remove(wal);
  ExpectRefused(path, absl::StatusCode::kDataLoss, "tensor files of checkpoint");
  StoreOptions o;
  o.accept_rollback = true;
  auto store = CheckpointStore::Open(path, TestIdentity(), o);
  ASSERT_TRUE(store.ok()) << store.status();
  EXPECT_FALSE((*store)->rollback().empty());
}

}  // namespace
}  // namespace diloco::storage
