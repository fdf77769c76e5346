// Deterministic test inputs for the kernel tests: Gaussian values whose magnitude changes from
// block to block (so scales differ), with one all-zero block when there is room for it.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

namespace diloco::kernels::testing {

inline std::vector<float> BlockyData(size_t n, uint32_t block, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> exponent(-4.0f, 3.0f);
  std::vector<float> x(n);
  float mag = 1.0f;
  for (size_t i = 0; i < n; ++i) {
    if (i % block == 0) mag = std::pow(10.0f, exponent(rng));
    x[i] = normal(rng) * mag;
  }
  if (n >= 3 * static_cast<size_t>(block)) {
    for (size_t i = block; i < 2 * static_cast<size_t>(block); ++i) x[i] = 0.0f;
  }
  return x;
}

inline std::vector<float> Gaussian(size_t n, uint32_t seed, float sigma = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  return x;
}

inline uint32_t Bits(float f) {
  uint32_t u;
  static_assert(sizeof(u) == sizeof(f));
  __builtin_memcpy(&u, &f, sizeof(u));
  return u;
}

}  // namespace diloco::kernels::testing
