// XXH3-64 compiled for AVX-512 (this file alone is built with -mavx512f; checksum.cc calls it
// only when the CPU has AVX-512F). Same hash value as every other build of XXH3: its vector paths
// are bit-identical by design, and the checksum test compares each one this CPU can run.
#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX512
#include <xxhash.h>

#include <cstddef>
#include <cstdint>

namespace diloco::internal {

uint64_t Checksum64Avx512(const void* data, size_t size) { return XXH3_64bits(data, size); }

}  // namespace diloco::internal
