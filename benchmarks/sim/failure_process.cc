#include "benchmarks/sim/failure_process.h"

#include <cmath>
#include <limits>

namespace diloco::sim {

double TimeToFailure(uint64_t seed, uint32_t learner, uint32_t k, double mean) {
  if (!std::isfinite(mean)) return std::numeric_limits<double>::infinity();
  return -mean * std::log(HashUniform(seed, 1, learner, k));
}

}  // namespace diloco::sim
