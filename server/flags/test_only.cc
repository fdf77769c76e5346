// diloco-server --help, group "test_only": [test only] Faults a test injects into a shard
// (common/faults.h); never set in production. They make the TestFaults of TestFaultsFromFlags
// (declared in server/flags/flags.h), which server_flags.cc hands to the serve loop
// (ServerOptions::faults) and to the shard (ShardOptions::faults).
#include <cstdint>
#include <memory>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "server/flags/flags.h"

ABSL_FLAG(double, test_drop_pushes, 0,
          "[test only] ack this fraction of pushes (at random, seeded) without merging them");
ABSL_FLAG(uint64_t, test_drop_seed, 0,
          "[test only] the seed of --test_drop_pushes' draw (a push's fate is a hash of the seed, "
          "the shard, the worker's id, the fragment and the push's sequence number)");
ABSL_FLAG(uint64_t, test_kill_after_applied, 0,
          "[test only] SIGKILL this process once this many Applied answers are ready, after "
          "they are durable (per-round) and audited but before any of them is sent; 0 = never");
ABSL_FLAG(absl::Duration, test_read_delay, absl::ZeroDuration(),
          "[test only] after the store is recovered, wait this long before reading the socket, "
          "which is bound all the while (a slow recovery: connections are taken, nothing read)");

namespace diloco::server {

absl::StatusOr<std::shared_ptr<const TestFaults>> TestFaultsFromFlags() {
  TestFaults f;
  f.kill_after_applied = absl::GetFlag(FLAGS_test_kill_after_applied);
  f.read_delay = absl::GetFlag(FLAGS_test_read_delay);
  f.drop_pushes = absl::GetFlag(FLAGS_test_drop_pushes);
  f.drop_seed = absl::GetFlag(FLAGS_test_drop_seed);
  if (f.read_delay < absl::ZeroDuration())
    return absl::InvalidArgumentError(
        absl::StrCat("--test_read_delay=", absl::FormatDuration(f.read_delay), ": must be >= 0"));
  if (f.kill_after_applied == 0 && f.read_delay == absl::ZeroDuration() && f.drop_pushes == 0)
    return nullptr;
  return std::make_shared<const TestFaults>(f);
}

}  // namespace diloco::server
