// RocksDB + tensor-file implementation of CheckpointStore. Layout and value format:
// storage/record_format.h (RocksDB records) and storage/tensor_file.h (tensors).
#include "storage/checkpoint_store.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <filesystem>
#include <set>
#include <system_error>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/mutex.h"
#include "rocksdb/db.h"
#include "rocksdb/options.h"
#include "rocksdb/slice.h"
#include "rocksdb/write_batch.h"
#include "storage/info_log.h"
#include "storage/record_format.h"
#include "storage/rocksdb_status.h"
#include "storage/tensor_file.h"

namespace diloco::storage {
namespace {

namespace fs = std::filesystem;
using format::MetaKey;
using format::MetaTag;

enum Cf : int { kDefault = 0, kMeta, kDedup, kNumCf };
const std::array<std::string, kNumCf> kCfNames = {rocksdb::kDefaultColumnFamilyName,
                                                  format::kMetaCf, format::kDedupCf};

std::string_view ToView(const rocksdb::Slice& s) { return {s.data(), s.size()}; }

std::string Hex(uint64_t v) { return absl::StrFormat("%016x", v); }

std::string Describe(const StoreIdentity& id) {
  return absl::StrCat("plan ", Hex(id.plan_fingerprint), " model ", Hex(id.model_fingerprint),
                      " shard ", id.shard, "/", id.num_shards);
}

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

rocksdb::DBOptions MakeDbOptions() {
  rocksdb::DBOptions o;
  // All column families flush together, so a flush never separates a manifest from its dedup
  // entries.
  o.atomic_flush = true;
  o.keep_log_file_num = 3;
  o.max_manifest_file_size = 64ull << 20;
  o.manifest_preallocation_size = 1ull << 20;
  o.max_background_jobs = 2;
  o.bytes_per_sync = 1ull << 20;
  o.wal_bytes_per_sync = 1ull << 20;
  o.paranoid_checks = true;
  return o;
}

rocksdb::ColumnFamilyOptions MakeCfOptions(const StoreOptions& so, Cf cf) {
  rocksdb::ColumnFamilyOptions c;
  c.compression = rocksdb::kNoCompression;  // fp32 noise does not compress; keys are tiny
  // Only small records live in RocksDB (tensors are files of their own; a per-round
  // checkpoint's records are ~1 KiB), but the WAL preallocates 1.1x the largest write buffer
  // on disk: at a 4 MiB cap that was 4.4 MiB, which with the MANIFEST's 1 MiB filled an 8 MiB
  // disk holding three checkpoints of the tiny model (tests/storage/disk_full_test.cc).
  c.write_buffer_size = std::min<uint64_t>(so.memtable_bytes, 1ull << 20);
  return c;
}

absl::Status NotAStore(const std::string& path, std::string_view why) {
  return absl::FailedPreconditionError(absl::StrCat(
      "'", path,
      "' is not a diloco checkpoint store: ", absl::string_view(why.data(), why.size())));
}

// Names RocksDB writes into a directory before CURRENT exists (an interrupted creation).
bool IsRocksCreationFile(const std::string& name) {
  return name == "LOCK" || name == kTensorDir || name == "IDENTITY" || name.starts_with("LOG") ||
         name.starts_with("MANIFEST-") || name.starts_with("OPTIONS-") ||
         name.ends_with(".dbtmp") || name.ends_with(".log");
}

enum class PathKind { kFresh, kExisting };

absl::StatusOr<PathKind> Inspect(const std::string& path, bool may_create) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (ec && ec != std::errc::no_such_file_or_directory)
    return absl::FailedPreconditionError(absl::StrCat("cannot stat '", path, "': ", ec.message()));
  if (!fs::exists(st)) {
    if (!may_create)
      return absl::NotFoundError(absl::StrCat("no checkpoint store at '", path, "'"));
    fs::create_directories(path, ec);
    if (ec)
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create store directory '", path, "': ", ec.message()));
    return PathKind::kFresh;
  }
  if (!fs::is_directory(st)) return NotAStore(path, "it is not a directory");
  if (fs::exists(fs::path(path) / "CURRENT", ec)) return PathKind::kExisting;
  std::vector<std::string> foreign;
  for (const fs::directory_entry& e : fs::directory_iterator(path, ec)) {
    const std::string name = e.path().filename().string();
    if (!IsRocksCreationFile(name)) foreign.push_back(name);
  }
  if (ec)
    return absl::FailedPreconditionError(absl::StrCat("cannot list '", path, "': ", ec.message()));
  if (!foreign.empty()) {
    if (foreign.size() > 3) foreign.resize(3);
    return NotAStore(path,
                     absl::StrCat("the directory holds other files (", absl::StrJoin(foreign, ", "),
                                  "...) and no RocksDB CURRENT"));
  }
  if (!may_create) return NotAStore(path, "no RocksDB CURRENT file");
  return PathKind::kFresh;
}

struct Header {
  bool initialized = false;  // schema + identity present
  StoreIdentity identity;
};

// Reads schema and identity through a read-only handle on the column families present, so a
// refused store is not modified. An existing RocksDB with none of our records and no data is
// an interrupted creation and reads as not initialized.
// The write-ahead log is replayed tolerating a cut tail only (what a crash leaves): damage
// before its end is DataLoss, where RocksDB's default recovery (point in time) would stop there
// silently and drop every record after it.
// With options.accept_rollback such damage is replayed the default way instead and described
// in `*rollback`.
absl::StatusOr<Header> ReadHeader(const std::string& path, const StoreOptions& options,
                                  std::string* rollback) {
  std::vector<std::string> present;
  rocksdb::Status s = rocksdb::DB::ListColumnFamilies(rocksdb::DBOptions(), path, &present);
  if (!s.ok()) return FromRocks(s, absl::StrCat("checkpoint store '", path, "' is unreadable"));
  for (const std::string& name : present) {
    if (std::find(kCfNames.begin(), kCfNames.end(), name) == kCfNames.end() &&
        name != format::kLegacyParamsCf && name != format::kLegacyMomentumCf)
      return NotAStore(path, absl::StrCat("unexpected column family '", name, "'"));
  }
  std::vector<rocksdb::ColumnFamilyDescriptor> descs;
  for (const std::string& name : present) descs.emplace_back(name, rocksdb::ColumnFamilyOptions());
  Db db;
  rocksdb::DB* raw = nullptr;
  rocksdb::DBOptions o = MakeDbOptions();
  o.info_log = NullInfoLog();
  o.wal_recovery_mode = rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords;
  s = rocksdb::DB::OpenForReadOnly(o, path, descs, &db.cfs, &raw);
  db.db.reset(raw);
  if (s.IsCorruption()) {
    const std::string why = absl::StrCat("checkpoint store '", path, "': its write-ahead log (",
                                         path, "/*.log) is damaged before its end (", s.ToString(),
                                         "); the checkpoints committed after the damage are lost");
    if (!options.accept_rollback)
      return absl::DataLossError(absl::StrCat(
          why,
          ". Restore the store, or accept the rollback to its newest intact checkpoint "
          "(diloco-server --accept_store_rollback)"));
    *rollback = why;
    o.wal_recovery_mode = rocksdb::WALRecoveryMode::kPointInTimeRecovery;
    db.cfs.clear();
    raw = nullptr;
    s = rocksdb::DB::OpenForReadOnly(o, path, descs, &db.cfs, &raw);
    db.db.reset(raw);
  }
  if (!s.ok()) return FromRocks(s, absl::StrCat("checkpoint store '", path, "' is unreadable"));

  rocksdb::ColumnFamilyHandle* meta = nullptr;
  for (size_t i = 0; i < present.size(); ++i)
    if (present[i] == format::kMetaCf) meta = db.cfs[i];
  Header h;
  std::string value;
  const std::string schema_key = MetaKey(MetaTag::kSchema);
  s = meta ? db.db->Get(rocksdb::ReadOptions(), meta, schema_key, &value)
           : rocksdb::Status::NotFound();
  if (s.IsNotFound()) {
    for (rocksdb::ColumnFamilyHandle* cf : db.cfs) {
      std::unique_ptr<rocksdb::Iterator> it(db.db->NewIterator(rocksdb::ReadOptions(), cf));
      it->SeekToFirst();
      if (it->Valid()) return NotAStore(path, "RocksDB data without a schema record");
      if (!it->status().ok()) return FromRocks(it->status(), "checkpoint store: reading header");
    }
    return h;
  }
  if (!s.ok()) return FromRocks(s, "checkpoint store: reading schema");
  absl::StatusOr<uint32_t> schema = format::DecodeSchema(schema_key, value);
  if (!schema.ok()) return schema.status();
  if (*schema != format::kSchemaVersion)
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint store '", path, "' has schema version ", *schema,
                     "; this build reads version ", format::kSchemaVersion));
  const std::string id_key = MetaKey(MetaTag::kIdentity);
  s = db.db->Get(rocksdb::ReadOptions(), meta, id_key, &value);
  if (s.IsNotFound())
    return absl::DataLossError(absl::StrCat("checkpoint store '", path, "' lacks its identity"));
  if (!s.ok()) return FromRocks(s, "checkpoint store: reading identity");
  absl::StatusOr<StoreIdentity> id = format::DecodeIdentity(id_key, value);
  if (!id.ok()) return id.status();
  h.initialized = true;
  h.identity = *id;
  return h;
}

// A RocksDB without our records (an interrupted creation) beside tensor files is a store whose
// records were all lost (its write-ahead log deleted before any flush), not a fresh one.
absl::Status VetUninitialized(const std::string& path, const StoreOptions& options,
                              std::string* rollback) {
  const uint64_t newest_file = NewestTensorFileCheckpoint(path + "/" + kTensorDir);
  if (newest_file == 0) return absl::OkStatus();
  const std::string why =
      absl::StrCat("checkpoint store '", path, "': tensor files of checkpoint ", newest_file,
                   " exist but RocksDB holds none of the store's records (its write-ahead log, ",
                   path, "/*.log, was deleted or cut)");
  if (!options.accept_rollback)
    return absl::DataLossError(absl::StrCat(why,
                                            ". Restore the store, or accept starting it anew "
                                            "(diloco-server --accept_store_rollback)"));
  *rollback = why;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Db>> OpenAll(const std::string& path, const StoreOptions& so,
                                            bool read_only, bool create) {
  rocksdb::DBOptions o = MakeDbOptions();
  o.info_log = read_only ? NullInfoLog() : OpenInfoLog(path);
  o.create_if_missing = create;
  o.create_missing_column_families = create;
  std::vector<rocksdb::ColumnFamilyDescriptor> descs;
  for (int i = 0; i < kNumCf; ++i)
    descs.emplace_back(kCfNames[i], MakeCfOptions(so, static_cast<Cf>(i)));
  auto db = std::make_unique<Db>();
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = read_only ? rocksdb::DB::OpenForReadOnly(o, path, descs, &db->cfs, &raw)
                                : rocksdb::DB::Open(o, path, descs, &db->cfs, &raw);
  db->db.reset(raw);
  if (s.IsIOError() && s.ToString().find("lock") != std::string::npos)
    return absl::FailedPreconditionError(
        absl::StrCat("checkpoint store '", path, "' is open in another process: ", s.ToString()));
  if (!s.ok()) return FromRocks(s, absl::StrCat("opening checkpoint store '", path, "'"));
  return db;
}

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
  absl::Status Init(bool vet) {
    MutexLock lock(&mu_);
    absl::StatusOr<std::vector<uint64_t>> ids = ScanIds(nullptr);
    if (!ids.ok()) return ids.status();
    ids_ = *std::move(ids);
    for (uint64_t id : ids_) {
      absl::StatusOr<format::CheckpointRecord> r = ReadRecord(id, nullptr);
      if (r.ok()) records_[id] = *std::move(r);
    }
    if (vet)
      if (absl::Status s = VetTensorFiles(); !s.ok()) return s;
    if (read_only_) return absl::OkStatus();
    std::error_code ec;
    fs::create_directories(tensor_dir_, ec);
    if (ec)
      return absl::FailedPreconditionError(
          absl::StrCat("cannot create '", tensor_dir_, "': ", ec.message()));
    if (records_.size() != ids_.size()) return absl::OkStatus();
    const absl::flat_hash_set<std::pair<uint32_t, uint64_t>> live = Referenced();
    for (const fs::directory_entry& e : fs::directory_iterator(tensor_dir_, ec)) {
      const std::string name = e.path().filename().string();
      uint32_t frag = 0;
      uint64_t holder = 0;
      const bool ours = ParseTensorFileName(name, &frag, &holder);
      if (name.ends_with(".tensor.tmp") || (ours && !live.contains({frag, holder})))
        fs::remove(e.path(), ec);
    }
    return absl::OkStatus();
  }

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

absl::Status RocksCheckpointStore::VetTensorFiles() {
  const uint64_t newest_file = NewestTensorFileCheckpoint(tensor_dir_);
  const uint64_t recovered = ids_.empty() ? 0 : ids_.back();
  if (newest_file <= recovered + 1) return absl::OkStatus();
  const std::string intact =
      recovered == 0 ? std::string("no checkpoint") : absl::StrCat("checkpoint ", recovered);
  const std::string why = absl::StrCat(
      "checkpoint store '", path_, "': tensor files of checkpoint ", newest_file,
      " exist but the newest manifest recovered is ", intact, ": the manifests of checkpoints ",
      recovered + 1, "..", newest_file, " are lost (RocksDB's write-ahead log, ", path_,
      "/*.log, was cut, deleted or damaged)");
  if (!options_.accept_rollback)
    return absl::DataLossError(absl::StrCat(why, ". Restore the store, or accept the rollback to ",
                                            intact, " (diloco-server --accept_store_rollback)"));
  rollback_ = rollback_.empty() ? why : absl::StrCat(rollback_, "; ", why);
  return absl::OkStatus();
}

// RocksDB's own recovery from a failed WAL append is not usable here: Resume() keeps the WAL
// writer that saw the error, and the next append to it fails forever (or, in Debian's
// assert-enabled build, aborts). Closing and reopening starts a fresh WAL; recovery drops the
// torn record at the old one's tail, so what a failed Write left is never visible.
absl::Status RocksCheckpointStore::Reopen() {
  db_.reset();
  absl::StatusOr<std::unique_ptr<Db>> db = OpenAll(path_, options_, /*read_only=*/false, false);
  if (!db.ok()) return db.status();
  db_ = *std::move(db);
  broken_ = false;
  return absl::OkStatus();
}

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

std::string Normalize(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (!p.has_filename() && p.has_parent_path() && p != p.root_path()) p = p.parent_path();
  return p.string();
}

}  // namespace

absl::StatusOr<std::unique_ptr<CheckpointStore>> CheckpointStore::Open(
    const std::string& path_in, const StoreIdentity& identity, const StoreOptions& options) {
  if (options.keep < 1)
    return absl::InvalidArgumentError(absl::StrCat("keep must be >= 1, got ", options.keep));
  const std::string path = Normalize(path_in);
  absl::StatusOr<PathKind> kind = Inspect(path, /*may_create=*/true);
  if (!kind.ok()) return kind.status();
  bool initialized = false;
  std::string rollback;
  std::optional<Checkpoint> latest;
  if (*kind == PathKind::kExisting) {
    absl::StatusOr<Header> h = ReadHeader(path, options, &rollback);
    if (!h.ok()) return h.status();
    initialized = h->initialized;
    if (initialized &&
        !(h->identity.plan_fingerprint == identity.plan_fingerprint &&
          h->identity.model_fingerprint == identity.model_fingerprint &&
          h->identity.shard == identity.shard && h->identity.num_shards == identity.num_shards))
      return absl::FailedPreconditionError(absl::StrCat(
          "checkpoint store '", path, "' belongs to ", Describe(h->identity), "; this server is ",
          Describe(identity), ". Use another --store directory or the matching plan."));
    if (initialized) {  // vetted read-only: what refuses the store must not change it
      absl::StatusOr<std::unique_ptr<Db>> ro = OpenAll(path, options, /*read_only=*/true, false);
      if (!ro.ok()) return ro.status();
      RocksCheckpointStore vet(path, *std::move(ro), identity, options, /*read_only=*/true);
      vet.SetRollback(rollback);
      if (absl::Status s = vet.Init(/*vet=*/true); !s.ok()) return s;
      absl::StatusOr<std::optional<Checkpoint>> c = vet.LoadLatest();
      if (!c.ok() && !vet.rollback().empty())  // accepted, but retention took its files
        return absl::DataLossError(absl::StrCat(
            vet.rollback(), "; and the newest checkpoint recovered does not load either (",
            c.status().message(), "): restore the store from a copy"));
      if (!c.ok()) return c.status();
      latest = *std::move(c);
      rollback = vet.rollback();
    } else if (absl::Status s = VetUninitialized(path, options, &rollback); !s.ok()) {
      return s;
    }
  }
  absl::StatusOr<std::unique_ptr<Db>> db =
      OpenAll(path, options, /*read_only=*/false, /*create=*/!initialized);
  if (!db.ok()) return db.status();
  if (!initialized) {
    rocksdb::WriteBatch batch;
    const std::string schema_key = MetaKey(MetaTag::kSchema), id_key = MetaKey(MetaTag::kIdentity);
    rocksdb::Status s = batch.Put((*db)->cfs[kMeta], schema_key,
                                  format::EncodeSchema(schema_key, format::kSchemaVersion));
    if (s.ok()) s = batch.Put((*db)->cfs[kMeta], id_key, format::EncodeIdentity(id_key, identity));
    rocksdb::WriteOptions wo;
    wo.sync = true;
    if (s.ok()) s = (*db)->db->Write(wo, &batch);
    if (!s.ok()) return FromRocks(s, absl::StrCat("initializing checkpoint store '", path, "'"));
  }
  auto store = std::make_unique<RocksCheckpointStore>(path, *std::move(db), identity, options,
                                                      /*read_only=*/false);
  if (absl::Status s = store->Init(/*vet=*/false); !s.ok()) return s;
  store->SetVetted(std::move(rollback), std::move(latest));
  return std::unique_ptr<CheckpointStore>(std::move(store));
}

absl::StatusOr<std::unique_ptr<CheckpointStore>> CheckpointStore::OpenForRead(
    const std::string& path_in, const StoreOptions& options) {
  const std::string path = Normalize(path_in);
  absl::StatusOr<PathKind> kind = Inspect(path, /*may_create=*/false);
  if (!kind.ok()) return kind.status();
  if (*kind != PathKind::kExisting) return NotAStore(path, "no RocksDB CURRENT file");
  std::string rollback;
  absl::StatusOr<Header> h = ReadHeader(path, options, &rollback);
  if (!h.ok()) return h.status();
  if (!h->initialized) {
    StoreOptions strict = options;
    strict.accept_rollback = false;  // nothing to read either way: say why
    if (absl::Status s = VetUninitialized(path, strict, &rollback); !s.ok()) return s;
    return NotAStore(path, "it was never initialized (no schema record)");
  }
  absl::StatusOr<std::unique_ptr<Db>> db = OpenAll(path, options, /*read_only=*/true, false);
  if (!db.ok()) return db.status();
  auto store = std::make_unique<RocksCheckpointStore>(path, *std::move(db), h->identity, options,
                                                      /*read_only=*/true);
  store->SetRollback(rollback);
  if (absl::Status s = store->Init(/*vet=*/true); !s.ok()) return s;
  return std::unique_ptr<CheckpointStore>(std::move(store));
}

}  // namespace diloco::storage
