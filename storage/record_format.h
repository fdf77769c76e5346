// The on-disk record format of a checkpoint store's RocksDB part: keys, values and checksums.
// The tensors themselves are files of their own (storage/tensor_file.h) named by the manifest.
//
// Keys are fixed-width big-endian so RocksDB's bytewise order is numeric order and one
// checkpoint's records form one contiguous key range per column family (retention deletes a
// range of ids with one DeleteRange):
//   meta      tag u8 | u64 (9 bytes)           tags below; checkpoint records use the id
//   dedup     checkpoint id u64 | worker u32 | fragment u32 (16 bytes)
//
// Values are little-endian and end with an XXH3-64 over key bytes and value bytes before it,
// so a flipped bit, a truncated value or a value stored under the wrong key reads as DataLoss:
//   dedup      generation u64 | last_seq u64 | checksum u64
//   checkpoint (the manifest) rounds u64 | outer_lr f32 | outer_momentum f32 | fragments u32 |
//              fragments x (id u32, version u64, numel u64, holder u64) | dedup entries u32 |
//              checksum u64; holder = the checkpoint whose tensor file holds that version
//              (0: version 0, no data)
//   identity   plan u64 | model u64 | shard u32 | num_shards u32 | checksum u64
//   schema     version u32 | checksum u64
//   latest     checkpoint id u64 | checksum u64
//
// Schema 1 (until this layout) kept params and momentum as values in column families "params"
// and "momentum" of every checkpoint; such a store is refused with its schema version named.
#pragma once

#include <bit>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "absl/status/statusor.h"
#include "storage/checkpoint_store.h"

namespace diloco::storage::format {

static_assert(std::endian::native == std::endian::little, "values are stored little-endian");

// Bump when any key or value layout above changes; Open refuses other versions.
inline constexpr uint32_t kSchemaVersion = 2;

inline constexpr char kMetaCf[] = "meta";
// Schema 1's tensor families: tolerated when reading a store's header, so that an old store is
// refused by its schema version rather than as foreign.
inline constexpr char kLegacyParamsCf[] = "params";
inline constexpr char kLegacyMomentumCf[] = "momentum";
inline constexpr char kDedupCf[] = "dedup";

enum class MetaTag : uint8_t {
  kSchema = 0x01,
  kIdentity = 0x02,
  kLatest = 0x03,
  kCheckpoint = 0x10,
};

inline constexpr size_t kMetaKeySize = 9;
inline constexpr size_t kDedupKeySize = 16;
inline constexpr size_t kIdPrefixSize = 8;
inline constexpr size_t kChecksumSize = 8;

std::string MetaKey(MetaTag tag, uint64_t value = 0);
std::string IdPrefix(uint64_t checkpoint_id);
std::string DedupKey(uint64_t checkpoint_id, uint32_t worker, uint32_t fragment);
uint64_t DecodeBigEndian64(std::string_view bytes);
uint32_t DecodeBigEndian32(std::string_view bytes);

// Checksum of key || body, as stored at the end of every value.
uint64_t RecordChecksum(std::string_view key, std::span<const std::string_view> body);

// Small records: encode returns the full value including the trailing checksum.
std::string EncodeIdentity(std::string_view key, const StoreIdentity& id);
absl::StatusOr<StoreIdentity> DecodeIdentity(std::string_view key, std::string_view value);
std::string EncodeU64Record(std::string_view key, uint64_t v);
absl::StatusOr<uint64_t> DecodeU64Record(std::string_view key, std::string_view value);
std::string EncodeSchema(std::string_view key, uint32_t version);
absl::StatusOr<uint32_t> DecodeSchema(std::string_view key, std::string_view value);

struct FragmentRecord {
  uint32_t id = 0;
  uint64_t version = 0;
  uint64_t numel = 0;
  uint64_t holder = 0;  // the checkpoint whose tensor file holds this version; 0 = no data
};
struct CheckpointRecord {
  uint64_t rounds = 0;
  OptimizerMeta optimizer;
  std::vector<FragmentRecord> fragments;
  uint32_t dedup_entries = 0;
};
std::string EncodeCheckpointRecord(std::string_view key, const CheckpointRecord& r);
absl::StatusOr<CheckpointRecord> DecodeCheckpointRecord(std::string_view key,
                                                        std::string_view value);

struct DedupValue {
  uint64_t generation = 0;
  uint64_t last_seq = 0;
};
std::string EncodeDedupValue(std::string_view key, const DedupValue& v);
absl::StatusOr<DedupValue> DecodeDedupValue(std::string_view key, std::string_view value);

}  // namespace diloco::storage::format
