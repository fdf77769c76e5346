// Checksums and fingerprints: XXH3-64 (libxxhash). Fast enough to checksum every payload frame
// at memory bandwidth; stable across processes and machines, so usable as a fingerprint.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <type_traits>
#include <vector>

namespace diloco {

// The widest build of XXH3 this CPU runs (AVX-512, AVX2, or the library's SSE2 build): the
// receive path reads every payload byte once for it, from memory another core just wrote.
uint64_t Checksum64(const void* data, size_t size);
// The same value from the library's baseline build.
uint64_t Checksum64Portable(const void* data, size_t size);

namespace internal {
// Every build of Checksum64 this CPU can run, widest last, for tests that compare them and
// benchmarks that time them.
struct ChecksumImpl {
  const char* name;
  uint64_t (*fn)(const void* data, size_t size);
};
std::vector<ChecksumImpl> ChecksumImpls();
}  // namespace internal

// Streaming hash for fingerprints over several fields.
class Hasher {
 public:
  Hasher();
  ~Hasher();
  Hasher(const Hasher&) = delete;
  Hasher& operator=(const Hasher&) = delete;
  void Update(const void* data, size_t size);
  // Length-prefixed, so ("ab","c") and ("a","bc") differ.
  void Update(std::string_view s);
  template <typename T>
  void UpdateValue(T v) requires std::is_arithmetic_v<T> {
    Update(&v, sizeof(v));
  }
  uint64_t Digest() const;

 private:
  void* state_;
};

}  // namespace diloco
