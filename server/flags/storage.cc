// diloco-server --help, group "storage": The checkpoint store (RocksDB), its durability and the
// checkpoints' cadence. Read by server_flags.cc (declared in server/flags/flags.h).
#include <cstdint>
#include <string>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "server/flags/flags.h"

using diloco::server::Durability;

ABSL_FLAG(std::string, store, "", "RocksDB checkpoint directory (empty: no persistence)");
ABSL_FLAG(bool, accept_store_rollback, false,
          "start from the newest intact checkpoint of a --store whose recovery lost committed "
          "checkpoints (a damaged, cut or deleted write-ahead log) instead of refusing to start; "
          "versions workers adopted may then be published again with other contents");
ABSL_FLAG(Durability, durability, Durability::kPeriodic, "periodic or per-round");
ABSL_FLAG(uint32_t, checkpoint_every_rounds, 20, "periodic mode: rounds between checkpoints");
ABSL_FLAG(absl::Duration, checkpoint_interval, absl::Seconds(30),
          "periodic mode: time between checkpoints");
