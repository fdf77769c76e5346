#include "common/hash_uniform.h"

namespace diloco {
namespace {

uint64_t SplitMix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

}  // namespace

double HashUniform(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
  const uint64_t h = SplitMix(SplitMix(SplitMix(SplitMix(seed) ^ a) ^ b) ^ c);
  return (static_cast<double>(h >> 11) + 0.5) * 0x1.0p-53;
}

}  // namespace diloco
