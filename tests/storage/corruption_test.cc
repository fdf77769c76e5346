// A catalogue of on-disk damage, one short test each (in the spirit of LevelDB's log_test):
// every case is written through a raw RocksDB handle, or into a tensor file, of a closed store,
// and the store must answer DataLoss or FailedPrecondition, never garbage or a crash.
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
using testutil::MakeContents;
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

class CorruptionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    path_ = dir_.Sub("s");
    auto store = CheckpointStore::Open(path_, TestIdentity());
    ASSERT_TRUE(store.ok()) << store.status();
    ASSERT_TRUE(WriteContents(**store, MakeContents(1, {0, 1}, 3000)).ok());
    ASSERT_TRUE(WriteContents(**store, MakeContents(2, {0, 1}, 3000), true).ok());
  }

  // Applies `edit`, then expects LoadLatest of a reopened store to fail with `code`.
  void ExpectLoadFails(
      const std::function<void(rocksdb::DB*, std::vector<rocksdb::ColumnFamilyHandle*>&)>& edit,
      absl::StatusCode code = absl::StatusCode::kDataLoss) {
    RawEdit(path_, edit);
    auto store = CheckpointStore::Open(path_, TestIdentity());
    ASSERT_TRUE(store.ok()) << store.status();
    auto latest = (*store)->LoadLatest();
    EXPECT_EQ(latest.status().code(), code) << latest.status();
  }

  // Applies `edit` to the bytes of fragment `frag`'s tensor file of checkpoint `holder`.
  void ExpectFileLoadFails(uint32_t frag, uint64_t holder,
                           const std::function<void(std::string&)>& edit) {
    const std::string file = path_ + "/tensors/" + TensorFileName(frag, holder);
    std::string bytes;
    {
      std::ifstream in(file, std::ios::binary);
      ASSERT_TRUE(in.good()) << file;
      bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
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

}  // namespace
}  // namespace diloco::storage
