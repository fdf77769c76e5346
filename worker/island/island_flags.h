// The island flags of diloco-worker (worker/island/island_spec.h says what an island is).
#pragma once

#include "absl/status/statusor.h"
#include "worker/island/island_spec.h"

namespace diloco::island {

// The flags, resolved against torchrun's and Slurm's variables of this process's environment.
absl::StatusOr<IslandSpec> IslandSpecFromFlags();

}  // namespace diloco::island
