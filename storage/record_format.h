// The on-disk record format of a checkpoint store: keys, values and their checksums.
//
// Keys are fixed-width big-endian so RocksDB's bytewise order is numeric order and one
// checkpoint's records form one contiguous key range per column family (retention deletes a
// range of ids with one DeleteRange):
//   meta      tag u8 | u64 (9 bytes)           tags below; checkpoint records use the id
//   params    checkpoint id u64 | fragment u32 (12 bytes)
//   momentum  checkpoint id u64 | fragment u32 (12 bytes)
//   dedup     checkpoint id u64 | worker u32 | fragment u32 (16 bytes)
//
// Values are little-endian and end with an XXH3-64 over key bytes and value bytes before it,
// so a flipped bit, a truncated value or a value stored under the wrong key reads as DataLoss:
//   params     version u64 | numel u64 | numel x f32 | checksum u64
//   momentum   numel u64 | numel x f32 | checksum u64
//   dedup      generation u64 | last_seq u64 | checksum u64
//   checkpoint rounds u64 | outer_lr f32 | outer_momentum f32 | fragments u32 |
//              fragments x (id u32, version u64, numel u64) | dedup entries u32 | checksum u64
//   identity   plan u64 | model u64 | shard u32 | num_shards u32 | checksum u64
//   schema     version u32 | checksum u64
//   latest     checkpoint id u64 | checksum u64
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
inline constexpr uint32_t kSchemaVersion = 1;

inline constexpr char kMetaCf[] = "meta";
inline constexpr char kParamsCf[] = "params";
inline constexpr char kMomentumCf[] = "momentum";
inline constexpr char kDedupCf[] = "dedup";

enum class MetaTag : uint8_t {
  kSchema = 0x01,
  kIdentity = 0x02,
  kLatest = 0x03,
  kCheckpoint = 0x10,
};

inline constexpr size_t kMetaKeySize = 9;
inline constexpr size_t kTensorKeySize = 12;
inline constexpr size_t kDedupKeySize = 16;
inline constexpr size_t kIdPrefixSize = 8;
inline constexpr size_t kChecksumSize = 8;

std::string MetaKey(MetaTag tag, uint64_t value = 0);
std::string IdPrefix(uint64_t checkpoint_id);
std::string TensorKey(uint64_t checkpoint_id, uint32_t fragment);
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

// Tensor values are large: the header and trailer are built separately so the floats are
// copied once, straight from the caller's span into the WriteBatch.
std::string ParamsHeader(uint64_t version, uint64_t numel);
std::string MomentumHeader(uint64_t numel);
std::string_view FloatBytes(std::span<const float> v);

struct DecodedTensor {
  uint64_t version = 0;     // params only
  std::string_view floats;  // numel * 4 bytes, inside the value
};
absl::StatusOr<DecodedTensor> DecodeParams(std::string_view key, std::string_view value);
absl::StatusOr<DecodedTensor> DecodeMomentum(std::string_view key, std::string_view value);

struct DedupValue {
  uint64_t generation = 0;
  uint64_t last_seq = 0;
};
std::string EncodeDedupValue(std::string_view key, const DedupValue& v);
absl::StatusOr<DedupValue> DecodeDedupValue(std::string_view key, std::string_view value);

}  // namespace diloco::storage::format
