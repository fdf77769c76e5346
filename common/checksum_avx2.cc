// XXH3-64 compiled for AVX2 (this file alone is built with -mavx2; checksum.cc calls it only
// when the CPU has AVX2 and not AVX-512). The hash value is the same as the library's: XXH3's
// vector paths are bit-identical by design; the checksum test compares them.
#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include <xxhash.h>

#include <cstddef>
#include <cstdint>

namespace diloco::internal {

uint64_t Checksum64Avx2(const void* data, size_t size) { return XXH3_64bits(data, size); }

}  // namespace diloco::internal
