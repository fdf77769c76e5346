// Token data on disk. Two formats:
//   * llm.c token files (.bin): a header of 256 little-endian int32 (magic 20240520, version 1,
//     number of tokens), then that many uint16 tokens. Real users already produce these with
//     llm.c's data scripts, so the worker trains on them unchanged.
//   * Raw text: every byte is one token (vocabulary 256), for quick experiments.
// Readers validate everything (magic, version, size, vocabulary) and say what is wrong.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace diloco::data {

inline constexpr int32_t kTokenFileMagic = 20240520;
inline constexpr int32_t kTokenFileVersion = 1;
inline constexpr int kTokenFileHeaderInts = 256;

// Reads a .bin file; every token must be < vocab.
absl::StatusOr<std::vector<uint16_t>> ReadTokenFile(const std::string& path, int vocab);

// Writes a .bin file (version 1).
absl::Status WriteTokenFile(const std::string& path, std::span<const uint16_t> tokens);

// Reads a file's bytes as tokens (vocabulary 256).
absl::StatusOr<std::vector<uint16_t>> ReadTextAsBytes(const std::string& path);

}  // namespace diloco::data
