// CheckpointStore, writing (storage/checkpoint_store_internal.h): a checkpoint's tensor files,
// then the one WriteBatch that commits it, and retention of the newest `keep`.
#include <algorithm>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "rocksdb/write_batch.h"
#include "storage/checkpoint_store_internal.h"
#include "storage/rocksdb_status.h"

namespace diloco::storage::store_internal {
namespace {

namespace fs = std::filesystem;
using format::MetaKey;
using format::MetaTag;

}  // namespace

absl::Status RocksCheckpointStore::AddRetention(uint64_t id, rocksdb::WriteBatch* batch,
                                                std::vector<uint64_t>* kept) {
  *kept = ids_;
  kept->push_back(id);
  const size_t keep = static_cast<size_t>(options_.keep);
  if (kept->size() <= keep) return absl::OkStatus();
  const uint64_t first = kept->front();
  const uint64_t oldest_kept = (*kept)[kept->size() - keep];
  const std::string from = format::IdPrefix(first), to = format::IdPrefix(oldest_kept);
  if (rocksdb::Status s = batch->DeleteRange(cf(kDedup), from, to); !s.ok())
    return FromRocks(s, "checkpoint store: retention");
  rocksdb::Status s = batch->DeleteRange(cf(kMeta), MetaKey(MetaTag::kCheckpoint, first),
                                         MetaKey(MetaTag::kCheckpoint, oldest_kept));
  if (!s.ok()) return FromRocks(s, "checkpoint store: retention");
  kept->erase(kept->begin(), kept->end() - keep);
  return absl::OkStatus();
}

absl::Status RocksCheckpointStore::Write(uint64_t id, uint64_t rounds,
                                         const OptimizerMeta& optimizer,
                                         std::span<const FragmentView> fragments,
                                         std::span<const DedupEntry> dedup, bool sync) {
  MutexLock lock(&mu_);
  if (read_only_) return absl::FailedPreconditionError("checkpoint store is open read-only");
  vetted_.reset();  // no longer the newest
  if (broken_) {
    if (absl::Status s = Reopen(); !s.ok())
      return absl::Status(s.code(), absl::StrCat("checkpoint store: reopening after a failed "
                                                 "write: ",
                                                 s.message()));
  }
  if (!ids_.empty() && id <= ids_.back())
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint id ", id, " does not exceed the newest kept checkpoint ", ids_.back()));
  const format::CheckpointRecord* prev = nullptr;
  if (!ids_.empty())
    if (auto it = records_.find(ids_.back()); it != records_.end()) prev = &it->second;
  format::CheckpointRecord rec;
  rec.rounds = rounds;
  rec.optimizer = optimizer;
  absl::flat_hash_set<uint32_t> seen;
  std::vector<const FragmentView*> to_write;
  for (const FragmentView& f : fragments) {
    if (!seen.insert(f.id).second)
      return absl::InvalidArgumentError(absl::StrCat("fragment ", f.id, " given twice"));
    if (!f.unchanged && f.params.size() != f.momentum.size())
      return absl::InvalidArgumentError(absl::StrCat("fragment ", f.id, ": ", f.params.size(),
                                                     " params but ", f.momentum.size(),
                                                     " momentum values"));
    if (f.version == 0) {  // no theta yet: nothing to write or keep
      rec.fragments.push_back({f.id, 0, f.params.size(), 0});
      continue;
    }
    if (f.unchanged) {
      const format::FragmentRecord* old = nullptr;
      if (prev)
        for (const format::FragmentRecord& r : prev->fragments)
          if (r.id == f.id) old = &r;
      if (!old || old->version != f.version || old->holder == 0 ||
          (!f.params.empty() && f.params.size() != old->numel))
        return absl::InvalidArgumentError(absl::StrCat(
            "fragment ", f.id, " is marked unchanged at version ", f.version,
            " but the newest checkpoint ",
            ids_.empty() ? std::string("(none)") : absl::StrCat(ids_.back()),
            old ? absl::StrCat(" holds version ", old->version, " of ", old->numel, " values")
                : std::string(" does not hold it")));
      rec.fragments.push_back(*old);
      continue;
    }
    rec.fragments.push_back({f.id, f.version, f.params.size(), id});
    to_write.push_back(&f);
  }
  absl::flat_hash_set<std::pair<uint32_t, uint32_t>> seen_dedup;
  for (const DedupEntry& d : dedup)
    if (!seen_dedup.insert({d.worker_id, d.fragment_id}).second)
      return absl::InvalidArgumentError(absl::StrCat("dedup entry for worker ", d.worker_id,
                                                     " fragment ", d.fragment_id, " given twice"));
  rec.dedup_entries = static_cast<uint32_t>(dedup.size());

  // The tensors first, each written once and synced; the batch below is the commit point, so a
  // crash before it leaves files no manifest names (removed at the next Open).
  for (const FragmentView* f : to_write) {
    absl::Status s = WriteTensorFile(tensor_dir_, {f->id, id, f->version, f->params.size()},
                                     f->params, f->momentum);
    if (!s.ok())
      return absl::Status(
          s.code(), absl::StrCat("checkpoint store: writing checkpoint ", id, ": ", s.message()));
  }
  if (!to_write.empty())
    if (absl::Status s = SyncDirectory(tensor_dir_); !s.ok())
      return absl::Status(
          s.code(), absl::StrCat("checkpoint store: writing checkpoint ", id, ": ", s.message()));

  rocksdb::WriteBatch batch;
  for (const DedupEntry& d : dedup) {
    const std::string key = format::DedupKey(id, d.worker_id, d.fragment_id);
    rocksdb::Status s =
        batch.Put(cf(kDedup), key, format::EncodeDedupValue(key, {d.generation, d.last_seq}));
    if (!s.ok()) return FromRocks(s, "checkpoint store: dedup");
  }
  const std::string rec_key = MetaKey(MetaTag::kCheckpoint, id);
  const std::string latest_key = MetaKey(MetaTag::kLatest);
  rocksdb::Status s = batch.Put(cf(kMeta), rec_key, format::EncodeCheckpointRecord(rec_key, rec));
  if (s.ok()) s = batch.Put(cf(kMeta), latest_key, format::EncodeU64Record(latest_key, id));
  if (!s.ok()) return FromRocks(s, "checkpoint store: meta");
  std::vector<uint64_t> kept;
  if (absl::Status r = AddRetention(id, &batch, &kept); !r.ok()) return r;

  rocksdb::WriteOptions wo;
  wo.sync = sync || !to_write.empty();
  // A failed write leaves RocksDB refusing writes (background-error state, and a WAL writer
  // that saw the error): the next Write reopens first. An error other than a full disk may be
  // a stale background error (a failed flush), so that write reopens and retries at once.
  s = db_->db->Write(wo, &batch);
  if (!s.ok() && !s.IsInvalidArgument()) {
    broken_ = true;
    if (!s.IsNoSpace() && Reopen().ok()) {
      s = db_->db->Write(wo, &batch);
      broken_ = !s.ok();
    }
  }
  // A failed batch leaves its tensor files: unnamed by any manifest, replaced by a retry of the
  // same id or removed at the next Open.
  if (!s.ok()) return FromRocks(s, absl::StrCat("checkpoint store: writing checkpoint ", id));

  // Retention: drop the manifests that left, then the files no kept manifest names (only when
  // every kept manifest is known; otherwise the next Open's sweep decides).
  std::vector<format::CheckpointRecord> dropped;
  for (uint64_t old : ids_)
    if (std::find(kept.begin(), kept.end(), old) == kept.end()) {
      if (auto it = records_.find(old); it != records_.end()) {
        dropped.push_back(std::move(it->second));
        records_.erase(it);
      }
    }
  ids_ = std::move(kept);
  records_[id] = std::move(rec);
  if (records_.size() == ids_.size()) {
    const absl::flat_hash_set<std::pair<uint32_t, uint64_t>> live = Referenced();
    for (const format::CheckpointRecord& r : dropped)
      for (const format::FragmentRecord& f : r.fragments)
        if (f.holder != 0 && !live.contains({f.id, f.holder})) {
          std::error_code ec;
          fs::remove(tensor_dir_ + "/" + TensorFileName(f.id, f.holder), ec);
        }
  }
  return absl::OkStatus();
}

}  // namespace diloco::storage::store_internal
