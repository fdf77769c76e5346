// diloco-server: one outer-optimizer shard. Binds a ROUTER socket, feeds every message to the
// Shard, sends its replies, closes rounds on time, and writes a final checkpoint on
// SIGTERM/SIGINT. Its flags and the options they make: server/server_flags.h.
#include <cstdio>
#include <memory>
#include <zmq.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/event_log.h"
#include "common/log.h"
#include "common/version.h"
#include "schema/transport.h"
#include "schema/wire.h"
#include "server/audit_log.h"
#include "server/metrics.h"
#include "server/serve_loop.h"
#include "server/serve_report.h"
#include "server/serve_socket.h"
#include "server/server_flags.h"
#include "server/shard.h"

namespace diloco::server {
namespace {

int Fail(const absl::Status& s) {
  Logf(LogLevel::kError, "diloco-server: %s", std::string(s.message()).c_str());
  return 2;
}

}  // namespace
}  // namespace diloco::server

int main(int argc, char** argv) {
  using namespace diloco;
  using namespace diloco::server;
  using diloco::server::Fail;
  SetVersionFlag("diloco-server", wire::kProtocolVersion);
  ParseServerFlags(argc, argv);
  auto options = ServerOptionsFromFlags();
  if (!options.ok()) return Fail(options.status());
  const ServerOptions& so = *options;
  WarnInsecure(so);
  const uint32_t index = so.shard.shard;
  wire::TuneAllocatorForFrames();
  wire::UseOneMallocArena();

  zmq::context_t ctx(1);
  auto curve = StartCurve(ctx, so);
  if (!curve.ok()) return Fail(curve.status());
  const auto& auth = curve->auth;
  zmq::socket_t sock(ctx, zmq::socket_type::router);
  std::string endpoint;
  if (auto s = Bind(sock, so, *curve, &endpoint); !s.ok()) return Fail(s);
  auto log = EventLog::Open(so.metrics_jsonl);
  if (!log.ok()) return Fail(log.status());
  auto audit = AuditLog::Open(so.audit_jsonl);
  if (!audit.ok()) return Fail(audit.status());
  std::unique_ptr<MetricsHttpServer> http;
  if (!so.metrics_address.empty()) {
    auto h = MetricsHttpServer::Start(so.metrics_address);
    if (!h.ok()) return Fail(h.status());
    http = std::move(*h);
    Logf(LogLevel::kInfo, "diloco-server: Prometheus metrics on %s, port %d%s",
         so.metrics_address.c_str(), http->port(),
         IsLoopbackHost(so.metrics_address.substr(0, so.metrics_address.rfind(':')))
             ? ""
             : " (plaintext and unauthenticated: CURVE does not cover it)");
  }
  // The store is opened (or created) last, once every other input has been accepted: a start
  // refused for a bad flag, key file or address leaves no store behind.
  SystemClock clock;
  auto created = Shard::Create(so.shard, &clock);
  if (!created.ok()) return Fail(created.status());
  Shard& shard = **created;
  // Handlers before the port file: whoever waits for the port file may signal at once (Slurm's
  // srun forwards SIGINT; an unhandled one would kill the shard without its final checkpoint).
  CatchStopSignals();
  // Test only: the socket has been bound since before the store was opened; a recovery this
  // long takes connections (libzmq handshakes them) and reads nothing.
  if (so.faults && so.faults->read_delay > absl::ZeroDuration())
    absl::SleepFor(so.faults->read_delay);
  WritePortFile(so.port_file, endpoint);
  Logf(LogLevel::kInfo, "diloco-server: shard %u/%u on %s, %zu fragments, plan %016lx%s", index,
       so.shard.num_shards, endpoint.c_str(), shard.owned().size(),
       static_cast<unsigned long>(shard.plan_fingerprint()),
       auth ? absl::StrCat(", CURVE with ", auth->size(), " authorized keys").c_str()
            : (so.insecure ? ", NO CURVE (--insecure)" : ", no CURVE (loopback only)"));

  audit->Started(shard);
  return Serve({.options = so,
                .sock = sock,
                .curve = *curve,
                .shard = shard,
                .log = *log,
                .audit = *audit,
                .http = http.get()});
}
