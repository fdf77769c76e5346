#include "common/checksum.h"

#include <xxhash.h>

namespace diloco {

namespace internal {
uint64_t Checksum64Avx2(const void* data, size_t size);    // checksum_avx2.cc
uint64_t Checksum64Avx512(const void* data, size_t size);  // checksum_avx512.cc

std::vector<ChecksumImpl> ChecksumImpls() {
  __builtin_cpu_init();  // may run before libgcc's own constructor has
  std::vector<ChecksumImpl> impls = {{"sse2", &XXH3_64bits}};
  if (__builtin_cpu_supports("avx2")) impls.push_back({"avx2", &Checksum64Avx2});
  if (__builtin_cpu_supports("avx512f")) impls.push_back({"avx512", &Checksum64Avx512});
  return impls;
}
}  // namespace internal

// Debian's libxxhash is built for baseline x86-64 (SSE2). Every payload byte is hashed on the
// receive path, mostly from memory another core has just written (measured with
// diloco-bench-checksum, benchmarks/checksum/RESULTS.md): use the widest vectors the CPU has.
// Chosen on first use, so that other files' static initialisers may hash too.
uint64_t Checksum64(const void* data, size_t size) {
  static const auto impl = internal::ChecksumImpls().back().fn;
  return impl(data, size);
}

uint64_t Checksum64Portable(const void* data, size_t size) { return XXH3_64bits(data, size); }

Hasher::Hasher() : state_(XXH3_createState()) {
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(state_));
}
Hasher::~Hasher() { XXH3_freeState(static_cast<XXH3_state_t*>(state_)); }

void Hasher::Update(const void* data, size_t size) {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(state_), data, size);
}

void Hasher::Update(std::string_view s) {
  UpdateValue(static_cast<uint64_t>(s.size()));
  Update(s.data(), s.size());
}

uint64_t Hasher::Digest() const { return XXH3_64bits_digest(static_cast<XXH3_state_t*>(state_)); }

}  // namespace diloco
