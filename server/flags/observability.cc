// diloco-server --help, group "observability": What the shard reports: progress lines, JSON-lines
// events, the audit log and Prometheus metrics. Read by server_flags.cc (declared in
// server/flags/flags.h).
#include <string>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "server/flags/flags.h"

ABSL_FLAG(absl::Duration, progress_interval, absl::Seconds(5), "progress line period");
ABSL_FLAG(std::string, metrics_jsonl, "", "append JSON-lines events (progress, shutdown) here");
ABSL_FLAG(std::string, audit_jsonl, "",
          "append one JSON line per promise here before it is made: the versions recovered at "
          "each start, each Applied answer (worker, generation, fragment, seq, version, and the "
          "steps and tokens the push claimed) and "
          "each theta(0) accepted (server/audit_log.h)");
ABSL_FLAG(std::string, metrics_address, "",
          "serve Prometheus text on http://HOST:PORT/metrics; a bare PORT (or :PORT) listens on "
          "127.0.0.1 "
          "(e.g. 9464; port 0 picks); another host only when named (0.0.0.0:9464: plaintext, "
          "unauthenticated, and without CURVE keys only with --insecure)");
