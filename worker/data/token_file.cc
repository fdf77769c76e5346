#include "worker/data/token_file.h"

#include <cstdio>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"

namespace diloco::data {
namespace {

struct FileCloser {
  void operator()(std::FILE* f) const { std::fclose(f); }
};
using File = std::unique_ptr<std::FILE, FileCloser>;

absl::StatusOr<std::vector<char>> ReadAll(const std::string& path) {
  File f(std::fopen(path.c_str(), "rb"));
  if (!f) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::vector<char> bytes;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f.get())) > 0)
    bytes.insert(bytes.end(), buf, buf + n);
  if (std::ferror(f.get())) return absl::DataLossError(absl::StrCat("read error on ", path));
  return bytes;
}

}  // namespace

absl::StatusOr<std::vector<uint16_t>> ReadTokenFile(const std::string& path, int vocab) {
  absl::StatusOr<std::vector<char>> bytes = ReadAll(path);
  if (!bytes.ok()) return bytes.status();
  constexpr size_t kHeaderBytes = kTokenFileHeaderInts * sizeof(int32_t);
  if (bytes->size() < kHeaderBytes)
    return absl::DataLossError(absl::StrCat(path, ": truncated header (", bytes->size(),
                                            " bytes, need ", kHeaderBytes, ")"));
  int32_t header[kTokenFileHeaderInts];
  std::memcpy(header, bytes->data(), kHeaderBytes);
  if (header[0] != kTokenFileMagic)
    return absl::InvalidArgumentError(absl::StrCat(path, ": bad magic ", header[0], ", expected ",
                                                   kTokenFileMagic, " (not an llm.c token file)"));
  if (header[1] != kTokenFileVersion)
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": unsupported version ", header[1], ", expected ", kTokenFileVersion));
  if (header[2] < 0)
    return absl::InvalidArgumentError(absl::StrCat(path, ": negative token count ", header[2]));
  const size_t n = static_cast<size_t>(header[2]);
  const size_t expected = kHeaderBytes + n * sizeof(uint16_t);
  if (bytes->size() < expected)
    return absl::DataLossError(absl::StrCat(path, ": truncated: header says ", n, " tokens (",
                                            expected, " bytes), file has ", bytes->size()));
  if (bytes->size() > expected)
    return absl::DataLossError(
        absl::StrCat(path, ": ", bytes->size() - expected, " trailing bytes after ", n, " tokens"));
  std::vector<uint16_t> tokens(n);
  std::memcpy(tokens.data(), bytes->data() + kHeaderBytes, n * sizeof(uint16_t));
  for (size_t i = 0; i < n; ++i) {
    if (tokens[i] >= vocab)
      return absl::OutOfRangeError(absl::StrCat(path, ": token ", tokens[i], " at position ", i,
                                                " is outside the vocabulary (", vocab, ")"));
  }
  return tokens;
}

absl::Status WriteTokenFile(const std::string& path, std::span<const uint16_t> tokens) {
  if (tokens.size() > static_cast<size_t>(INT32_MAX))
    return absl::InvalidArgumentError("too many tokens for an llm.c token file");
  int32_t header[kTokenFileHeaderInts] = {};
  header[0] = kTokenFileMagic;
  header[1] = kTokenFileVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  File f(std::fopen(path.c_str(), "wb"));
  if (!f) return absl::PermissionDeniedError(absl::StrCat("cannot create ", path));
  if (std::fwrite(header, sizeof(header), 1, f.get()) != 1 ||
      (!tokens.empty() &&
       std::fwrite(tokens.data(), sizeof(uint16_t), tokens.size(), f.get()) != tokens.size()))
    return absl::DataLossError(absl::StrCat("write error on ", path));
  if (std::fclose(f.release()) != 0) return absl::DataLossError(absl::StrCat("close ", path));
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint16_t>> ReadTextAsBytes(const std::string& path) {
  absl::StatusOr<std::vector<char>> bytes = ReadAll(path);
  if (!bytes.ok()) return bytes.status();
  std::vector<uint16_t> tokens(bytes->size());
  for (size_t i = 0; i < bytes->size(); ++i) tokens[i] = static_cast<unsigned char>((*bytes)[i]);
  return tokens;
}

}  // namespace diloco::data
