// diloco-worker --help, group "observability": What the learner reports: progress lines and the
// JSON-lines events. Read by worker_flags.cc (declared in worker/flags/flags.h).
#include <string>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "worker/flags/flags.h"

ABSL_FLAG(absl::Duration, progress_interval, absl::Seconds(5), "progress line period");
ABSL_FLAG(std::string, metrics_jsonl, "", "append JSON-lines events here");
ABSL_FLAG(bool, log_sync_events, false,
          "also write one JSON line per sync event (joined, push, applied, duplicate, stale, "
          "refused, shard_restart) to --metrics_jsonl");
