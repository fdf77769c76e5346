// What diloco-server says while it serves, besides the shard's own log lines: the --insecure
// warning and gauge, the port file, progress lines and the checkpoint failures the event log
// hears of. Apart from the serve loop (serve_loop.h) so that it reads as the order of a pass.
#pragma once

#include <cstdint>
#include <string>

#include "common/event_log.h"
#include "server/server_flags.h"
#include "server/shard.h"

namespace diloco::server {

// --insecure, loudly: what is exposed and what that means, once at start.
void WarnInsecure(const ServerOptions& so);

// The diloco_insecure gauge, after the shard's own metrics.
std::string InsecureGauge(const ServerOptions& so, uint32_t shard);

// Written whole (a rename), so whoever waits for the file reads the endpoint or nothing.
void WritePortFile(const std::string& path, const std::string& endpoint);

// The progress line on stderr and its event, every --progress_interval.
void ReportProgress(const Shard& shard, EventLog& log);

// Machines following the event log hear of each new checkpoint failure cause and of the
// recovery; `noted` is the cause the log was last told of.
void NoteCheckpointError(const ShardCounters& c, EventLog& log, std::string* noted);

}  // namespace diloco::server
