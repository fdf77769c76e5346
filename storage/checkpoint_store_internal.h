// The RocksDB + tensor-file CheckpointStore's parts that its files (storage/checkpoint_store*.cc)
// share: the open database and the store class. The class is split by job:
//   checkpoint_store.cc        opening and vetting a store, recovery, reopening after an error
//   checkpoint_store_write.cc  writing a checkpoint and retention
//   checkpoint_store_read.cc   listing and loading checkpoints, the size on disk
// Not for users of the store (storage/checkpoint_store.h is its interface).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "common/mutex.h"
#include "rocksdb/db.h"
#include "storage/checkpoint_store.h"
#include "storage/record_format.h"
#include "storage/tensor_file.h"

namespace diloco::storage::store_internal {

enum Cf : int { kDefault = 0, kMeta, kDedup, kNumCf };

// An open DB and its column family handles, released in the order RocksDB requires.
struct Db {
  std::unique_ptr<rocksdb::DB> db;
  std::vector<rocksdb::ColumnFamilyHandle*> cfs;  // indexed by Cf when all are open
  ~Db() {
    if (!db) return;
    for (rocksdb::ColumnFamilyHandle* h : cfs)
      db->DestroyColumnFamilyHandle(h).PermitUncheckedError();
    db->Close().PermitUncheckedError();
  }
};

// Opens every column family of the store at `path` (creating the database and them when
// `create`); a database another process holds open is FailedPrecondition.
absl::StatusOr<std::unique_ptr<Db>> OpenAll(const std::string& path, const StoreOptions& so,
                                            bool read_only, bool create);

class RocksCheckpointStore final : public CheckpointStore {
 public:
  RocksCheckpointStore(std::string path, std::unique_ptr<Db> db, const StoreIdentity& identity,
                       const StoreOptions& options, bool read_only)
      : path_(std::move(path)),
        identity_(identity),
        options_(options),
        read_only_(read_only),
        db_(std::move(db)),
        tensor_dir_(path_ + "/" + kTensorDir) {}

  // Lists the kept checkpoints and their manifests; with `vet`, refuses a store whose recovery
  // lost committed manifests (CheckpointStore::Open) unless accept_rollback. A writable store
  // also removes tensor files no kept manifest names (a write cut by a crash). An undecodable
  // manifest is left for Load to report as DataLoss, and then nothing is removed.
  absl::Status Init(bool vet);

  absl::Status Write(uint64_t id, uint64_t rounds, const OptimizerMeta& optimizer,
                     std::span<const FragmentView> fragments, std::span<const DedupEntry> dedup,
                     bool sync) override;
  absl::StatusOr<std::optional<Checkpoint>> LoadLatest() override;
  absl::StatusOr<Checkpoint> LoadCheckpoint(uint64_t id) override;
  StoreIdentity identity() const override { return identity_; }
  absl::StatusOr<std::vector<uint64_t>> ListCheckpoints() override {
    MutexLock lock(&mu_);
    if (!db_) return Reopening();
    return ScanIds(nullptr);
  }
  uint64_t ApproximateSizeBytes() override;
  const std::string& rollback() const override { return rollback_; }

  // What the read-only vetting of Open found: its rollback note and the newest checkpoint,
  // handed to the first LoadLatest unless a Write comes first.
  void SetVetted(std::string rollback, std::optional<Checkpoint> latest) {
    MutexLock lock(&mu_);
    rollback_ = std::move(rollback);
    vetted_ = std::move(latest);
  }
  void SetRollback(const std::string& why) { rollback_ = why; }

 private:
  // Tensor files name the checkpoint that wrote them, and each is synced before its manifest's
  // batch, which is synced too: files of a checkpoint past the newest manifest plus one mean
  // that recovered manifests are missing.
  absl::Status VetTensorFiles() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  rocksdb::ColumnFamilyHandle* cf(Cf c) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return db_->cfs[c];
  }
  static absl::Status Reopening() {
    return absl::UnavailableError(
        "checkpoint store: the database could not be reopened after a write error; the next "
        "Write retries");
  }
  absl::Status Reopen() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::vector<uint64_t>> ScanIds(const rocksdb::Snapshot* snap)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<Checkpoint> LoadAt(uint64_t id, const rocksdb::Snapshot* snap)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status AddRetention(uint64_t id, rocksdb::WriteBatch* batch, std::vector<uint64_t>* kept)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<format::CheckpointRecord> ReadRecord(uint64_t id, const rocksdb::Snapshot* snap)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // (fragment, holder) of every tensor file a kept manifest names.
  absl::flat_hash_set<std::pair<uint32_t, uint64_t>> Referenced() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    absl::flat_hash_set<std::pair<uint32_t, uint64_t>> live;
    for (const auto& [_, r] : records_)
      for (const format::FragmentRecord& f : r.fragments)
        if (f.holder != 0) live.insert({f.id, f.holder});
    return live;
  }

  const std::string path_;
  const StoreIdentity identity_;
  const StoreOptions options_;
  const bool read_only_;
  Mutex mu_;
  std::unique_ptr<Db> db_ ABSL_GUARDED_BY(mu_);     // null while a reopen is pending
  std::vector<uint64_t> ids_ ABSL_GUARDED_BY(mu_);  // kept checkpoints, ascending
  bool broken_ ABSL_GUARDED_BY(mu_) = false;        // a write failed: reopen before the next
  const std::string tensor_dir_;
  // The kept checkpoints' manifests (those that decode), by id.
  absl::flat_hash_map<uint64_t, format::CheckpointRecord> records_ ABSL_GUARDED_BY(mu_);
  std::string rollback_;  // set while opening only
  // Open's vetted newest checkpoint (outer: whether there is one to hand over).
  std::optional<std::optional<Checkpoint>> vetted_ ABSL_GUARDED_BY(mu_);
};

}  // namespace diloco::storage::store_internal
