// Where the ranks of one island find each other. An island is one learner made of R processes
// (ranks) on one node or several: every rank trains the whole model on its share of the batch,
// the ranks average their gradients every inner step, and rank 0 alone talks to the shards.
//
// The rank, the island's size and the rendezvous address come from, in this order: the flags
// (--island_rank, --island_size, --island_master), torchrun's variables (RANK, WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT), or Slurm's (SLURM_PROCID and SLURM_STEP_NUM_TASKS of the srun
// step, with MASTER_ADDR and MASTER_PORT from the environment, which the recipe sets to the
// allocation's first node).
// Without any of them the worker is an island of one: no rendezvous, nothing changes.
//
// A rank's local rank (its index among the ranks on its node, the GPU a --device=cuda rank
// trains on) is torchrun's LOCAL_RANK, else Slurm's SLURM_LOCALID, else 0.
#pragma once

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "schema/curve.h"

namespace diloco::island {

struct IslandSpec {
  int rank = 0;
  int size = 1;
  std::string master_host;  // rank 0's address (a name or an IP), where the rendezvous listens
  int master_port = 0;
  // A collective (gradient all-reduce, broadcast, checksum) that has not completed within this
  // ends the island with an error naming the rank it lost.
  absl::Duration timeout = absl::Seconds(30);
  // How long the ranks wait for each other at the start (a scheduler may start them apart).
  absl::Duration rendezvous_timeout = absl::Minutes(2);
  std::string source;  // where rank and size came from: "flags", "torchrun" or "slurm"
  int local_rank = 0;
  std::string local_rank_from;  // "LOCAL_RANK", "SLURM_LOCALID", or "" (the default 0)
  // Test only (--island_rendezvous_alone): an island of one rank that still meets at its
  // rendezvous and runs every collective, so one GPU can take the path of many.
  bool rendezvous_alone = false;
  // The learner's CURVE key pair (its shard keys): the rendezvous store speaks CURVE with it.
  // Without keys the store is plaintext, allowed on loopback only unless `insecure`.
  std::optional<wire::CurveKeyPair> keys;
  bool insecure = false;

  bool alone() const { return size == 1 && !rendezvous_alone; }
};

// What the command line said (absent: not given).
struct IslandFlags {
  std::optional<int> rank, size;
  std::string master;  // HOST:PORT
  absl::Duration timeout = absl::Seconds(30);
  absl::Duration rendezvous_timeout = absl::Minutes(2);
  bool insecure = false;
  bool rendezvous_alone = false;
};

// getenv, replaceable in tests.
using EnvFn = std::function<const char*(const char*)>;

// The island this process belongs to, or an error naming the variable or flag at fault (a rank
// outside [0, size), a size below 1, a missing or malformed rendezvous address, a timeout <= 0,
// a negative or malformed local rank, --island_rendezvous_alone without an island of one).
absl::StatusOr<IslandSpec> ResolveIsland(const IslandFlags& flags, const EnvFn& env);

}  // namespace diloco::island
