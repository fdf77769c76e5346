// A catalogue of on-disk damage, one short test each (in the spirit of LevelDB's log_test):
// every case is written through a raw RocksDB handle on a closed store, and the store must
// answer DataLoss or FailedPrecondition, never garbage or a crash.
#include <cstring>
#include <functional>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "rocksdb/db.h"
#include "storage/checkpoint_store.h"
#include "storage/record_format.h"
#include "tests/storage/test_util.h"

namespace diloco::storage {
namespace {

using ::testing::HasSubstr;
using testutil::MakeContents;
using testutil::TempDir;
using testutil::TestIdentity;
using testutil::WriteContents;
namespace format = storage::format;

enum Cf { kDefault, kMeta, kParams, kMomentum, kDedup };

// Opens the store's RocksDB directly and hands `edit` the DB and its column families.
void RawEdit(
    const std::string& path,
    const std::function<void(rocksdb::DB*, std::vector<rocksdb::ColumnFamilyHandle*>&)>& edit) {
  std::vector<rocksdb::ColumnFamilyDescriptor> descs;
  for (const char* n :
       {"default", format::kMetaCf, format::kParamsCf, format::kMomentumCf, format::kDedupCf})
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

  TempDir dir_;
  std::string path_;
};

TEST_F(CorruptionTest, UntouchedStoreLoads) {
  ExpectLoadFails([](auto*, auto&) {}, absl::StatusCode::kOk);
}

TEST_F(CorruptionTest, FlippedParamsByte) {
  ExpectLoadFails([](rocksdb::DB* db, auto& cfs) {
    const std::string key = format::TensorKey(2, 1);
    std::string v = Get(db, cfs[kParams], key);
    v[100] ^= 0x10;
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), cfs[kParams], key, v).ok());
  });
}

TEST_F(CorruptionTest, FlippedMomentumByte) {
  ExpectLoadFails([](rocksdb::DB* db, auto& cfs) {
    const std::string key = format::TensorKey(2, 0);
    std::string v = Get(db, cfs[kMomentum], key);
    v[v.size() / 2] ^= 0x01;
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), cfs[kMomentum], key, v).ok());
  });
}

TEST_F(CorruptionTest, TruncatedParams) {
  ExpectLoadFails([](rocksdb::DB* db, auto& cfs) {
    const std::string key = format::TensorKey(2, 0);
    std::string v = Get(db, cfs[kParams], key);
    v.resize(v.size() - 4);
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), cfs[kParams], key, v).ok());
  });
}

TEST_F(CorruptionTest, ShortValue) {
  ExpectLoadFails([](rocksdb::DB* db, auto& cfs) {
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), cfs[kParams], format::TensorKey(2, 0), "x").ok());
  });
}

TEST_F(CorruptionTest, ValueFromAnotherKey) {
  // A value that is internally valid but belongs to fragment 0 of the older checkpoint: the
  // checksum covers the key, so the swap is caught.
  ExpectLoadFails([](rocksdb::DB* db, auto& cfs) {
    std::string v = Get(db, cfs[kParams], format::TensorKey(1, 0));
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), cfs[kParams], format::TensorKey(2, 0), v).ok());
  });
}

TEST_F(CorruptionTest, MomentumLengthDiffersFromParams) {
  // A well-formed momentum value (valid checksum) of the wrong length.
  ExpectLoadFails([](rocksdb::DB* db, auto& cfs) {
    const std::string key = format::TensorKey(2, 0);
    std::vector<float> m(10, 1.0f);
    const std::string header = format::MomentumHeader(m.size());
    const std::string_view body[] = {header, format::FloatBytes(m)};
    const uint64_t sum = format::RecordChecksum(key, body);
    std::string v = header + std::string(format::FloatBytes(m));
    v.append(reinterpret_cast<const char*>(&sum), sizeof(sum));
    ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), cfs[kMomentum], key, v).ok());
  });
}

TEST_F(CorruptionTest, MissingMomentum) {
  ExpectLoadFails([](rocksdb::DB* db, auto& cfs) {
    ASSERT_TRUE(db->Delete(rocksdb::WriteOptions(), cfs[kMomentum], format::TensorKey(2, 1)).ok());
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
