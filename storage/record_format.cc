#include "storage/record_format.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/checksum.h"

namespace diloco::storage::format {
namespace {

void AppendBigEndian(std::string* out, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out->push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

template <typename T>
void AppendLittle(std::string* out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));
  out->append(b, sizeof(T));
}

void AppendChecksum(std::string_view key, std::string* value) {
  const std::string_view body[] = {*value};
  AppendLittle<uint64_t>(value, RecordChecksum(key, body));
}

absl::Status Corrupt(std::string_view what, std::string_view key) {
  std::string hex;
  for (unsigned char c : key) absl::StrAppend(&hex, absl::Hex(c, absl::kZeroPad2));
  return absl::DataLossError(absl::StrCat("checkpoint store: corrupt ",
                                          absl::string_view(what.data(), what.size()),
                                          " record (key ", hex, ")"));
}

// Bounds-checked little-endian reader over a value; Ok() is false after any overrun.
class Cursor {
 public:
  explicit Cursor(std::string_view s) : s_(s) {}
  template <typename T>
  T Read() {
    T v{};
    if (s_.size() < sizeof(T)) {
      ok_ = false;
      s_ = {};
      return v;
    }
    std::memcpy(&v, s_.data(), sizeof(T));
    s_.remove_prefix(sizeof(T));
    return v;
  }
  std::string_view Take(uint64_t n) {
    if (s_.size() < n) {
      ok_ = false;
      s_ = {};
      return {};
    }
    std::string_view r = s_.substr(0, n);
    s_.remove_prefix(n);
    return r;
  }
  bool Ok() const { return ok_; }
  size_t Left() const { return s_.size(); }

 private:
  std::string_view s_;
  bool ok_ = true;
};

// Splits value into body and trailing checksum and verifies it.
absl::StatusOr<std::string_view> VerifiedBody(std::string_view what, std::string_view key,
                                              std::string_view value) {
  if (value.size() < kChecksumSize) return Corrupt(what, key);
  std::string_view body = value.substr(0, value.size() - kChecksumSize);
  uint64_t stored;
  std::memcpy(&stored, value.data() + body.size(), kChecksumSize);
  const std::string_view parts[] = {body};
  if (RecordChecksum(key, parts) != stored) return Corrupt(what, key);
  return body;
}

}  // namespace

std::string MetaKey(MetaTag tag, uint64_t value) {
  std::string k(1, static_cast<char>(tag));
  AppendBigEndian(&k, value, 8);
  return k;
}

std::string IdPrefix(uint64_t checkpoint_id) {
  std::string k;
  AppendBigEndian(&k, checkpoint_id, 8);
  return k;
}

std::string DedupKey(uint64_t checkpoint_id, uint32_t worker, uint32_t fragment) {
  std::string k = IdPrefix(checkpoint_id);
  AppendBigEndian(&k, worker, 4);
  AppendBigEndian(&k, fragment, 4);
  return k;
}

uint64_t DecodeBigEndian64(std::string_view b) {
  uint64_t v = 0;
  for (size_t i = 0; i < 8 && i < b.size(); ++i) v = (v << 8) | static_cast<unsigned char>(b[i]);
  return v;
}

uint32_t DecodeBigEndian32(std::string_view b) {
  uint32_t v = 0;
  for (size_t i = 0; i < 4 && i < b.size(); ++i) v = (v << 8) | static_cast<unsigned char>(b[i]);
  return v;
}

uint64_t RecordChecksum(std::string_view key, std::span<const std::string_view> body) {
  Hasher h;
  h.Update(key.data(), key.size());
  for (std::string_view part : body) h.Update(part.data(), part.size());
  return h.Digest();
}

std::string EncodeIdentity(std::string_view key, const StoreIdentity& id) {
  std::string v;
  AppendLittle(&v, id.plan_fingerprint);
  AppendLittle(&v, id.model_fingerprint);
  AppendLittle(&v, id.shard);
  AppendLittle(&v, id.num_shards);
  AppendChecksum(key, &v);
  return v;
}

absl::StatusOr<StoreIdentity> DecodeIdentity(std::string_view key, std::string_view value) {
  absl::StatusOr<std::string_view> body = VerifiedBody("identity", key, value);
  if (!body.ok()) return body.status();
  Cursor c(*body);
  StoreIdentity id;
  id.plan_fingerprint = c.Read<uint64_t>();
  id.model_fingerprint = c.Read<uint64_t>();
  id.shard = c.Read<uint32_t>();
  id.num_shards = c.Read<uint32_t>();
  if (!c.Ok() || c.Left() != 0) return Corrupt("identity", key);
  return id;
}

std::string EncodeU64Record(std::string_view key, uint64_t v) {
  std::string out;
  AppendLittle(&out, v);
  AppendChecksum(key, &out);
  return out;
}

absl::StatusOr<uint64_t> DecodeU64Record(std::string_view key, std::string_view value) {
  absl::StatusOr<std::string_view> body = VerifiedBody("meta", key, value);
  if (!body.ok()) return body.status();
  Cursor c(*body);
  uint64_t v = c.Read<uint64_t>();
  if (!c.Ok() || c.Left() != 0) return Corrupt("meta", key);
  return v;
}

std::string EncodeSchema(std::string_view key, uint32_t version) {
  std::string out;
  AppendLittle(&out, version);
  AppendChecksum(key, &out);
  return out;
}

absl::StatusOr<uint32_t> DecodeSchema(std::string_view key, std::string_view value) {
  absl::StatusOr<std::string_view> body = VerifiedBody("schema", key, value);
  if (!body.ok()) return body.status();
  Cursor c(*body);
  uint32_t v = c.Read<uint32_t>();
  if (!c.Ok() || c.Left() != 0) return Corrupt("schema", key);
  return v;
}

std::string EncodeCheckpointRecord(std::string_view key, const CheckpointRecord& r) {
  std::string v;
  AppendLittle(&v, r.rounds);
  AppendLittle(&v, r.optimizer.outer_lr);
  AppendLittle(&v, r.optimizer.outer_momentum);
  AppendLittle(&v, static_cast<uint32_t>(r.fragments.size()));
  for (const FragmentRecord& f : r.fragments) {
    AppendLittle(&v, f.id);
    AppendLittle(&v, f.version);
    AppendLittle(&v, f.numel);
    AppendLittle(&v, f.holder);
  }
  AppendLittle(&v, r.dedup_entries);
  AppendChecksum(key, &v);
  return v;
}

absl::StatusOr<CheckpointRecord> DecodeCheckpointRecord(std::string_view key,
                                                        std::string_view value) {
  absl::StatusOr<std::string_view> body = VerifiedBody("checkpoint", key, value);
  if (!body.ok()) return body.status();
  Cursor c(*body);
  CheckpointRecord r;
  r.rounds = c.Read<uint64_t>();
  r.optimizer.outer_lr = c.Read<float>();
  r.optimizer.outer_momentum = c.Read<float>();
  const uint32_t n = c.Read<uint32_t>();
  if (!c.Ok() || c.Left() < uint64_t{n} * 28) return Corrupt("checkpoint", key);
  r.fragments.resize(n);
  for (FragmentRecord& f : r.fragments) {
    f.id = c.Read<uint32_t>();
    f.version = c.Read<uint64_t>();
    f.numel = c.Read<uint64_t>();
    f.holder = c.Read<uint64_t>();
  }
  r.dedup_entries = c.Read<uint32_t>();
  if (!c.Ok() || c.Left() != 0) return Corrupt("checkpoint", key);
  return r;
}

std::string EncodeDedupValue(std::string_view key, const DedupValue& v) {
  std::string out;
  AppendLittle(&out, v.generation);
  AppendLittle(&out, v.last_seq);
  AppendChecksum(key, &out);
  return out;
}

absl::StatusOr<DedupValue> DecodeDedupValue(std::string_view key, std::string_view value) {
  absl::StatusOr<std::string_view> body = VerifiedBody("dedup", key, value);
  if (!body.ok()) return body.status();
  Cursor c(*body);
  DedupValue v;
  v.generation = c.Read<uint64_t>();
  v.last_seq = c.Read<uint64_t>();
  if (!c.Ok() || c.Left() != 0) return Corrupt("dedup", key);
  return v;
}

}  // namespace diloco::storage::format
