// What diloco-server says while it serves (serve_report.h).
#include "server/serve_report.h"

#include <cstdio>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/log.h"
#include "server/metrics.h"

namespace diloco::server {

void WarnInsecure(const ServerOptions& so) {
  if (!so.insecure) return;
  Logf(LogLevel::kInfo,
       "diloco-server: WARNING: --insecure: %s served WITHOUT CURVE on a non-loopback "
       "address: plaintext, and anyone who reaches it can read the model and push as any "
       "worker (docs/security.md)",
       absl::StrJoin(so.exposed, " and ").c_str());
}

std::string InsecureGauge(const ServerOptions& so, uint32_t shard) {
  return absl::StrCat(
      "# HELP diloco_insecure 1 while served without CURVE on a non-loopback address "
      "(--insecure).\n# TYPE diloco_insecure gauge\ndiloco_insecure{shard=\"",
      shard, "\"} ", so.insecure ? 1 : 0, "\n");
}

void WritePortFile(const std::string& path, const std::string& endpoint) {
  if (path.empty()) return;
  const std::string tmp = path + ".tmp";
  { std::ofstream(tmp) << endpoint << "\n"; }
  std::rename(tmp.c_str(), path.c_str());
}

void ReportProgress(const Shard& shard, EventLog& log) {
  Logf(LogLevel::kInfo, "%s", ProgressLine(shard).c_str());
  JsonObject ev;
  ev.Add("event", "progress").AddRaw("stats", shard.StatsJson());
  log.Write(ev);
}

void NoteCheckpointError(const ShardCounters& c, EventLog& log, std::string* noted) {
  if (c.checkpoint_error == *noted) return;
  JsonObject ev;
  ev.Add("event", c.checkpoint_error.empty() ? "checkpoint_recovered" : "checkpoint_failed")
      .Add("failures", c.checkpoint_failures);
  if (!c.checkpoint_error.empty())
    ev.Add("code", c.checkpoint_error_code).Add("error", c.checkpoint_error);
  log.Write(ev);
  *noted = c.checkpoint_error;
}

}  // namespace diloco::server
