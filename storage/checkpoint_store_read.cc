// CheckpointStore, reading (storage/checkpoint_store_internal.h): the kept checkpoints' ids and
// manifests, loading one whole and verified, and the store's size on disk.
#include <filesystem>
#include <string_view>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "rocksdb/slice.h"
#include "storage/checkpoint_store_internal.h"
#include "storage/rocksdb_status.h"

namespace diloco::storage::store_internal {
namespace {

namespace fs = std::filesystem;
using format::MetaKey;
using format::MetaTag;

std::string_view ToView(const rocksdb::Slice& s) { return {s.data(), s.size()}; }

}  // namespace

absl::StatusOr<std::vector<uint64_t>> RocksCheckpointStore::ScanIds(const rocksdb::Snapshot* snap) {
  const std::string lo = MetaKey(MetaTag::kCheckpoint, 0);
  const std::string hi(1, static_cast<char>(static_cast<uint8_t>(MetaTag::kCheckpoint) + 1));
  rocksdb::Slice upper(hi);
  rocksdb::ReadOptions ro;
  ro.snapshot = snap;
  ro.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->db->NewIterator(ro, cf(kMeta)));
  std::vector<uint64_t> ids;
  for (it->Seek(lo); it->Valid(); it->Next()) {
    if (it->key().size() != format::kMetaKeySize)
      return absl::DataLossError("checkpoint store: malformed checkpoint record key");
    ids.push_back(format::DecodeBigEndian64(ToView(it->key()).substr(1)));
  }
  if (!it->status().ok()) return FromRocks(it->status(), "checkpoint store: listing checkpoints");
  return ids;
}

absl::StatusOr<format::CheckpointRecord> RocksCheckpointStore::ReadRecord(
    uint64_t id, const rocksdb::Snapshot* snap) {
  rocksdb::ReadOptions ro;
  ro.snapshot = snap;
  ro.verify_checksums = true;
  const std::string rec_key = MetaKey(MetaTag::kCheckpoint, id);
  std::string rec_value;
  rocksdb::Status s = db_->db->Get(ro, cf(kMeta), rec_key, &rec_value);
  if (s.IsNotFound())
    return absl::NotFoundError(absl::StrCat("checkpoint ", id, " is not kept in this store"));
  if (!s.ok()) return FromRocks(s, absl::StrCat("checkpoint store: reading checkpoint ", id));
  return format::DecodeCheckpointRecord(rec_key, rec_value);
}

absl::StatusOr<Checkpoint> RocksCheckpointStore::LoadAt(uint64_t id,
                                                        const rocksdb::Snapshot* snap) {
  absl::StatusOr<format::CheckpointRecord> rec = ReadRecord(id, snap);
  if (!rec.ok()) return rec.status();
  rocksdb::ReadOptions ro;
  ro.snapshot = snap;
  ro.verify_checksums = true;
  ro.fill_cache = false;

  Checkpoint c;
  c.id = id;
  c.rounds = rec->rounds;
  c.optimizer = rec->optimizer;
  for (const format::FragmentRecord& fr : rec->fragments) {
    FragmentState f;
    f.id = fr.id;
    f.version = fr.version;
    f.params.assign(fr.numel, 0.0f);  // version 0: theta not set yet, zeros as at start
    f.momentum.assign(fr.numel, 0.0f);
    if ((fr.version == 0) != (fr.holder == 0) || fr.holder > id)
      return absl::DataLossError(absl::StrCat("checkpoint ", id, ": fragment ", fr.id, " version ",
                                              fr.version, " names holder ", fr.holder));
    if (fr.holder != 0) {
      absl::Status s = ReadTensorFile(tensor_dir_, {fr.id, fr.holder, fr.version, fr.numel},
                                      f.params, f.momentum);
      if (!s.ok()) return s;
    }
    c.fragments.push_back(std::move(f));
  }

  const std::string lo = format::IdPrefix(id), hi = format::IdPrefix(id + 1);
  rocksdb::Slice upper(hi);
  ro.iterate_upper_bound = &upper;
  std::unique_ptr<rocksdb::Iterator> it(db_->db->NewIterator(ro, cf(kDedup)));
  for (it->Seek(lo); it->Valid(); it->Next()) {
    const std::string_view key = ToView(it->key());
    if (key.size() != format::kDedupKeySize)
      return absl::DataLossError(absl::StrCat("checkpoint ", id, ": malformed dedup key"));
    absl::StatusOr<format::DedupValue> v = format::DecodeDedupValue(key, ToView(it->value()));
    if (!v.ok()) return v.status();
    DedupEntry d;
    d.worker_id = format::DecodeBigEndian32(key.substr(8, 4));
    d.fragment_id = format::DecodeBigEndian32(key.substr(12, 4));
    d.generation = v->generation;
    d.last_seq = v->last_seq;
    c.dedup.push_back(d);
  }
  if (!it->status().ok()) return FromRocks(it->status(), "checkpoint store: reading dedup");
  if (c.dedup.size() != rec->dedup_entries)
    return absl::DataLossError(absl::StrCat("checkpoint ", id, ": ", c.dedup.size(),
                                            " dedup entries, the record says ",
                                            rec->dedup_entries));
  return c;
}

absl::StatusOr<Checkpoint> RocksCheckpointStore::LoadCheckpoint(uint64_t id) {
  MutexLock lock(&mu_);
  if (!db_) return Reopening();
  rocksdb::ManagedSnapshot snap(db_->db.get());
  return LoadAt(id, snap.snapshot());
}

absl::StatusOr<std::optional<Checkpoint>> RocksCheckpointStore::LoadLatest() {
  MutexLock lock(&mu_);
  if (vetted_) {
    std::optional<Checkpoint> c = *std::move(vetted_);
    vetted_.reset();
    return c;
  }
  if (!db_) return Reopening();
  rocksdb::ManagedSnapshot snap(db_->db.get());
  rocksdb::ReadOptions ro;
  ro.snapshot = snap.snapshot();
  const std::string key = MetaKey(MetaTag::kLatest);
  std::string value;
  rocksdb::Status s = db_->db->Get(ro, cf(kMeta), key, &value);
  absl::StatusOr<std::vector<uint64_t>> ids = ScanIds(snap.snapshot());
  if (!ids.ok()) return ids.status();
  if (s.IsNotFound()) {
    if (ids->empty()) return std::nullopt;
    return absl::DataLossError(
        "checkpoint store: checkpoints exist but the latest pointer is gone");
  }
  if (!s.ok()) return FromRocks(s, "checkpoint store: reading the latest pointer");
  absl::StatusOr<uint64_t> latest = format::DecodeU64Record(key, value);
  if (!latest.ok()) return latest.status();
  if (ids->empty() || ids->back() != *latest)
    return absl::DataLossError(absl::StrCat(
        "checkpoint store: the latest pointer names ", *latest, " but the newest record is ",
        ids->empty() ? std::string("none") : absl::StrCat(ids->back())));
  absl::StatusOr<Checkpoint> c = LoadAt(*latest, snap.snapshot());
  if (!c.ok()) return c.status();
  return std::optional<Checkpoint>(*std::move(c));
}

uint64_t RocksCheckpointStore::ApproximateSizeBytes() {
  MutexLock lock(&mu_);
  if (!db_) return 0;
  std::vector<rocksdb::ColumnFamilyMetaData> cfs;
  db_->db->GetAllColumnFamilyMetaData(&cfs);
  uint64_t total = 0;
  for (const rocksdb::ColumnFamilyMetaData& m : cfs) total += m.size + m.blob_file_size;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(tensor_dir_, ec))
    if (e.is_regular_file(ec)) total += e.file_size(ec);
  rocksdb::VectorLogPtr wals;
  if (db_->db->GetSortedWalFiles(wals).ok())
    for (const auto& w : wals) total += w->SizeFileBytes();
  return total;
}

}  // namespace diloco::storage::store_internal
