// A uniform draw without a generator: a counter-based hash (SplitMix64's finaliser, chained)
// of (seed, a, b, c). The same arguments give the same value in every process and build, and a
// draw does not depend on how many were made before it or in what order, which is what a
// seeded choice needs when events arrive in an order timing decides (the shard's test drops,
// the fleet simulation's failure process).
#pragma once

#include <cstdint>

namespace diloco {

// Uniform in (0, 1), never 0 or 1, from (seed, a, b, c).
double HashUniform(uint64_t seed, uint64_t a, uint64_t b, uint64_t c);

}  // namespace diloco
