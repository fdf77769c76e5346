// The seeded failure process, drawn without state: the k-th time to failure of learner l is a
// function of (seed, l, k) alone (a counter-based hash), so a million learners need no
// generator each, and a run's failures do not depend on the order events are handled in.
#pragma once

#include <cstdint>

#include "common/hash_uniform.h"

namespace diloco::sim {

// Exponential of mean `mean` (infinity when mean is infinite) for learner l's k-th draw.
double TimeToFailure(uint64_t seed, uint32_t learner, uint32_t k, double mean);

}  // namespace diloco::sim
