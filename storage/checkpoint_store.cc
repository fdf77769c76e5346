// RocksDB + tensor-file implementation of CheckpointStore, opening
// (storage/checkpoint_store_internal.h): the read-only vetting of an existing store, its creation,
// and recovery's sweep. Layout and value format: storage/record_format.h (RocksDB records) and
// storage/tensor_file.h (tensors).
#include "storage/checkpoint_store.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "rocksdb/options.h"
#include "rocksdb/write_batch.h"
#include "storage/checkpoint_store_internal.h"
#include "storage/info_log.h"
#include "storage/rocksdb_status.h"

namespace diloco::storage {
namespace {

namespace fs = std::filesystem;
using format::MetaKey;
using format::MetaTag;
using store_internal::Cf;
using store_internal::Db;
using store_internal::kMeta;
using store_internal::kNumCf;
using store_internal::OpenAll;
using store_internal::RocksCheckpointStore;

const std::array<std::string, kNumCf> kCfNames = {rocksdb::kDefaultColumnFamilyName,
                                                  format::kMetaCf, format::kDedupCf};

std::string Hex(uint64_t v) { return absl::StrFormat("%016x", v); }

std::string Describe(const StoreIdentity& id) {
  return absl::StrCat("plan ", Hex(id.plan_fingerprint), " model ", Hex(id.model_fingerprint),
                      " shard ", id.shard, "/", id.num_shards);
}

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

std::string Normalize(const std::string& path) {
  fs::path p = fs::path(path).lexically_normal();
  if (!p.has_filename() && p.has_parent_path() && p != p.root_path()) p = p.parent_path();
  return p.string();
}

}  // namespace

namespace store_internal {

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

absl::Status RocksCheckpointStore::Init(bool vet) {
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

}  // namespace store_internal

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
