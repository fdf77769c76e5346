#include "common/checksum.h"

#include <xxhash.h>

namespace diloco {

namespace internal {
uint64_t Checksum64Avx2(const void* data, size_t size);  // checksum_avx2.cc
}  // namespace internal

namespace {
// Debian's libxxhash is built for baseline x86-64 (SSE2); every payload byte is hashed on the
// receive path, so use AVX2 where the CPU has it (about twice the bytes per cycle).
const bool kHaveAvx2 = __builtin_cpu_supports("avx2");
}  // namespace

uint64_t Checksum64(const void* data, size_t size) {
  return kHaveAvx2 ? internal::Checksum64Avx2(data, size) : XXH3_64bits(data, size);
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
