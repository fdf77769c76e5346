#include "worker/island/island_flags.h"

#include <cstdlib>
#include <optional>

#include "absl/flags/flag.h"

ABSL_FLAG(std::optional<int>, island_rank, std::nullopt,
          "this process's rank in its island (one learner of several processes); default: "
          "torchrun's RANK, else Slurm's SLURM_PROCID, else an island of one");
ABSL_FLAG(std::optional<int>, island_size, std::nullopt,
          "the island's ranks; default: torchrun's WORLD_SIZE, else the srun step's "
          "SLURM_STEP_NUM_TASKS, else 1");
ABSL_FLAG(std::string, island_master, "",
          "HOST:PORT where rank 0 serves the island's rendezvous; default: MASTER_ADDR and "
          "MASTER_PORT");
ABSL_FLAG(absl::Duration, island_timeout, absl::Seconds(30),
          "a collective that has not completed within this ends the island with an error naming "
          "the rank lost (a rank killed is found at once, a node that vanished after this)");
ABSL_FLAG(absl::Duration, island_rendezvous_timeout, absl::Minutes(2),
          "how long the ranks wait for each other at the start");
ABSL_FLAG(bool, island_insecure, false,
          "let the island's rendezvous listen in plaintext on a non-loopback address (without "
          "this, it needs the learner's CURVE keys: --curve_secret_key_file and "
          "--curve_server_key)");
ABSL_FLAG(bool, island_rendezvous_alone, false,
          "test only: an island of one rank (--island_rank=0 --island_size=1) still meets at "
          "--island_master and runs every collective, NCCL's with --device=cuda, as a larger "
          "island does (the GPU check's way to take that path on one GPU)");

namespace diloco::island {

absl::StatusOr<IslandSpec> IslandSpecFromFlags() {
  IslandFlags f;
  f.rank = absl::GetFlag(FLAGS_island_rank);
  f.size = absl::GetFlag(FLAGS_island_size);
  f.master = absl::GetFlag(FLAGS_island_master);
  f.timeout = absl::GetFlag(FLAGS_island_timeout);
  f.rendezvous_timeout = absl::GetFlag(FLAGS_island_rendezvous_timeout);
  f.insecure = absl::GetFlag(FLAGS_island_insecure);
  f.rendezvous_alone = absl::GetFlag(FLAGS_island_rendezvous_alone);
  return ResolveIsland(f, [](const char* name) { return std::getenv(name); });
}

}  // namespace diloco::island
