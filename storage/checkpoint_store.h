// A shard's durable state: RocksDB for the small records, one file per (fragment, checkpoint)
// for the tensors. A checkpoint writes the fragments whose version moved (params and momentum,
// storage/tensor_file.h, each byte written once and fsync'd), then one WriteBatch holding the
// manifest record, which names for every fragment its version and the checkpoint whose file
// holds it, the shard's dedup table and the round counter. The batch is the commit point, so on
// disk params, momentum, versions and dedup always belong to the same round for each fragment
// (docs/architecture.md, "Invariants", 4).
//
// Column families: "meta" (schema version, plan fingerprint, shard, the manifests, the newest
// complete checkpoint id), "dedup". Keys are fixed-width big-endian. Every value and file
// carries a checksum, so damage reads as DataLoss. Retention keeps the newest `keep` manifests
// and the files they name. storage/record_format.h has the byte layout; docs/storage.md the
// durability contract.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace diloco::storage {

// What identifies the store's owner; a store written for another plan/shard is refused.
struct StoreIdentity {
  uint64_t plan_fingerprint = 0;
  uint64_t model_fingerprint = 0;
  uint32_t shard = 0;
  uint32_t num_shards = 0;
};

struct FragmentView {  // borrowed from the shard's live state while Write() runs
  uint32_t id = 0;
  uint64_t version = 0;
  std::span<const float> params;
  std::span<const float> momentum;
  // The newest checkpoint already holds this fragment at this version: its data is not read
  // or written again, the new manifest names the file that holds it (params and momentum may
  // be empty). A version-0 fragment (no theta yet) is never written either way.
  bool unchanged = false;
};

// Per (worker, fragment): the newest generation seen and the last sequence number of it whose
// push is applied. Each worker numbers its pushes per fragment, so entries are bounded by
// workers x fragments and a newer generation replaces the older.
struct DedupEntry {
  uint32_t worker_id = 0;
  uint32_t fragment_id = 0;
  uint64_t generation = 0;
  uint64_t last_seq = 0;
  bool operator==(const DedupEntry&) const = default;
};

struct OptimizerMeta {
  float outer_lr = 0.7f;
  float outer_momentum = 0.9f;
};

struct FragmentState {
  uint32_t id = 0;
  uint64_t version = 0;
  std::vector<float> params;
  std::vector<float> momentum;
};

struct Checkpoint {
  uint64_t id = 0;      // strictly increasing per store
  uint64_t rounds = 0;  // rounds closed by the shard when it was taken
  OptimizerMeta optimizer;
  std::vector<FragmentState> fragments;
  std::vector<DedupEntry> dedup;
};

struct StoreOptions {
  int keep = 3;                          // checkpoints retained (>= 1)
  uint64_t memtable_bytes = 1ull << 20;  // per column family, at most 1 MiB; then a flush
  // Open a store whose recovery lost checkpoints it had committed (see Open) from its newest
  // intact checkpoint instead of refusing it; rollback() then says what was lost.
  bool accept_rollback = false;
};

class CheckpointStore {
 public:
  // Opens or creates the store at `path`. An existing store is vetted read-only first, so a
  // refused open changes no byte of it:
  //   - identity or schema version differs: FailedPrecondition;
  //   - the newest checkpoint does not load whole and verified (LoadLatest): its DataLoss;
  //   - recovery lost committed checkpoints: DataLoss naming what was lost and the newest intact
  //     checkpoint, unless options.accept_rollback. Lost means RocksDB's write-ahead log is
  //     damaged before its end (a crash only ever cuts its tail), or tensor files exist of a
  //     checkpoint newer than the newest manifest recovered plus one (the one write a crash can
  //     cut between its files and its manifest; checkpoints are written one at a time with
  //     consecutive ids): the log was cut or deleted. A log cut exactly before the newest
  //     manifest looks like such a crash and is not told apart from it.
  // The vetted newest checkpoint is kept and handed to the first LoadLatest, which so reads the
  // tensors once.
  static absl::StatusOr<std::unique_ptr<CheckpointStore>> Open(const std::string& path,
                                                               const StoreIdentity& identity,
                                                               const StoreOptions& options = {});
  // Opens an existing store read-only without knowing its identity (diloco-ctl); a store that
  // lost committed checkpoints is refused as by Open unless options.accept_rollback.
  static absl::StatusOr<std::unique_ptr<CheckpointStore>> OpenForRead(
      const std::string& path, const StoreOptions& options = {});

  virtual ~CheckpointStore() = default;

  // Writes checkpoint `id` (must exceed every earlier id): the tensor files of the fragments
  // not `unchanged` (always fsync'd), then one WriteBatch with the manifest; with `sync`, or
  // when tensor files were written, that batch is on stable storage when this returns (so a
  // manifest is never lost while files newer than it survive: Open's vetting relies on it;
  // a checkpoint of unchanged fragments only, without `sync`, is not synced). On error nothing of
  // it is visible and the previous checkpoint stays the newest (a failed write may still surface
  // after a crash, whole or not at all). A full disk gives ResourceExhausted; the next Write first
  // clears RocksDB's background-error state, so writing resumes once space is freed. Thread-safe
  // (one lock); the server calls Write from its writer thread.
  virtual absl::Status Write(uint64_t id, uint64_t rounds, const OptimizerMeta& optimizer,
                             std::span<const FragmentView> fragments,
                             std::span<const DedupEntry> dedup, bool sync) = 0;
  // The newest complete checkpoint, or nullopt for an empty store. A value that fails its
  // checksum or disagrees with the checkpoint record gives DataLoss (never an older one).
  virtual absl::StatusOr<std::optional<Checkpoint>> LoadLatest() = 0;
  // One kept checkpoint by id (NotFound if not kept), validated like LoadLatest.
  virtual absl::StatusOr<Checkpoint> LoadCheckpoint(uint64_t id) = 0;
  virtual StoreIdentity identity() const = 0;
  // Ids of the checkpoints kept, oldest first.
  virtual absl::StatusOr<std::vector<uint64_t>> ListCheckpoints() = 0;
  // Bytes on disk (approximate: RocksDB's live files and the tensor files).
  virtual uint64_t ApproximateSizeBytes() = 0;
  // What recovery lost, when the store was opened with accept_rollback over a loss (empty
  // otherwise): the sentence Open would have refused it with.
  virtual const std::string& rollback() const = 0;
};

}  // namespace diloco::storage
