// One fragment's params and momentum as of one checkpoint, in a file of its own under the
// store's `tensors/` directory. A checkpoint writes the fragments that changed as such files
// (each byte written once, fsync'd) and then commits a small manifest record in RocksDB that
// names, for every fragment, the file holding its version; the manifest is the commit point, so
// a file no kept manifest names is garbage (a crash mid-write) and is removed.
//
// Layout (little-endian), `<fragment:08x>-<checkpoint:016x>.tensor`:
//   magic u64 | fragment u32 | reserved u32 | checkpoint u64 | version u64 | numel u64 |
//   numel x f32 params | numel x f32 momentum | XXH3-64 of everything before it
// The header repeats what the manifest says, so a file renamed or copied from another fragment
// or checkpoint reads as DataLoss, as does a flipped bit or a wrong length.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "absl/status/status.h"

namespace diloco::storage {

inline constexpr char kTensorDir[] = "tensors";
inline constexpr uint64_t kTensorHeaderBytes = 40;

struct TensorFileId {
  uint32_t fragment = 0;
  uint64_t checkpoint = 0;  // the checkpoint that wrote it (the manifest's "holder")
  uint64_t version = 0;
  uint64_t numel = 0;
};

std::string TensorFileName(uint32_t fragment, uint64_t checkpoint);
// Parses a name TensorFileName made; false for anything else.
bool ParseTensorFileName(const std::string& name, uint32_t* fragment, uint64_t* checkpoint);
uint64_t TensorFileBytes(uint64_t numel);
// The newest checkpoint that a tensor file in `dir` names (0: none, or no such directory).
uint64_t NewestTensorFileCheckpoint(const std::string& dir);

// Writes `dir/<name>` through a temporary file: written, fdatasync'd, renamed. The caller syncs
// the directory once after its files (SyncDirectory). A full disk is ResourceExhausted.
absl::Status WriteTensorFile(const std::string& dir, const TensorFileId& id,
                             std::span<const float> params, std::span<const float> momentum);
// Reads and verifies the file `id` names into params and momentum (each id.numel long).
// Missing, short, mislabelled or damaged files are DataLoss naming the file.
absl::Status ReadTensorFile(const std::string& dir, const TensorFileId& id, std::span<float> params,
                            std::span<float> momentum);
absl::Status SyncDirectory(const std::string& dir);

}  // namespace diloco::storage
