// diloco-server's serving loop: takes messages in for a bounded time, feeds them to the Shard
// (checking CURVE key bindings first), closes due rounds, trims the heap, sends the replies,
// publishes metrics and progress; at a stop signal, the final checkpoint and the "shutdown"
// event. It takes the parts main built in ServeParts, so that main stays the wiring of flags
// to parts.
#pragma once

#include <zmq.hpp>

#include "common/event_log.h"
#include "server/audit_log.h"
#include "server/metrics.h"
#include "server/serve_socket.h"
#include "server/server_flags.h"
#include "server/shard.h"

namespace diloco::server {

// SIGINT and SIGTERM end the serve loop, with a final checkpoint.
void CatchStopSignals();

struct ServeParts {
  const ServerOptions& options;
  zmq::socket_t& sock;  // bound (serve_socket.h)
  const Curve& curve;   // its keys and ZAP handler; empty without CURVE
  Shard& shard;
  EventLog& log;            // --metrics_jsonl
  AuditLog& audit;          // --audit_jsonl
  MetricsHttpServer* http;  // null without --metrics_address
};

// Serves until a stop signal. Returns the process's exit code: 0, 1 when the final checkpoint
// failed, 2 after saying why on stderr.
int Serve(const ServeParts& parts);

}  // namespace diloco::server
