// diloco-server: one outer-optimizer shard. Binds a ROUTER socket, feeds every message to the
// Shard, sends its replies, closes rounds on time, and writes a final checkpoint on
// SIGTERM/SIGINT. Its flags and the options they make: server/server_flags.h.
#include <algorithm>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <zmq.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/event_log.h"
#include "common/version.h"
#include "schema/curve.h"
#include "schema/transport.h"
#include "server/audit_log.h"
#include "server/heap_trim.h"
#include "server/metrics.h"
#include "server/server_flags.h"
#include "server/shard.h"

namespace diloco::server {
namespace {

// The longest one pass of the event loop spends taking messages in before it closes due
// rounds and sends what is ready (Shard::Tick has its own close budget).
constexpr absl::Duration kReceiveBudget = absl::Milliseconds(50);

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "diloco-server: %s\n", std::string(s.message()).c_str());
  return 2;
}

// With CURVE, the worker id a message claims must be the one its authenticated key is listed
// for (Stats, read-only, may come from any listed key). Checked on the header alone, before the
// Shard sees the message; a message whose header does not verify goes on to the Shard, which
// refuses and counts it.
absl::Status CheckKeyBinding(const wire::AuthorizedKeys& keys, zmq::message_t& header_frame,
                             wire::MessageIds* claimed) {
  using namespace wire;
  const auto user = UserIdOf(header_frame);  // before VerifyHeaderFrame may copy the frame
  auto h = VerifyHeaderFrame(header_frame);
  if (!h.ok() || (*h)->type() == MsgType::Stats) return absl::OkStatus();
  *claimed = MessageIds::Of(**h);
  const auto listed = user ? keys.WorkerOf(*user) : std::nullopt;
  if (!listed) return WireError(ErrorCode::BadIdentity, "connection has no authorized CURVE key");
  if (*listed != claimed->worker)
    return WireError(ErrorCode::BadIdentity,
                     absl::StrCat("this CURVE key belongs to worker ", *listed,
                                  ", message claims worker ", claimed->worker));
  return absl::OkStatus();
}

// CURVE, when --curve_secret_key_file is given: the secret key, the authorized keys, and the
// ZAP handler, which must answer before the socket accepts its first connection.
struct Curve {
  std::string secret;
  std::optional<wire::AuthorizedKeys> auth;
  std::unique_ptr<wire::ZapHandler> zap;
};

absl::StatusOr<Curve> StartCurve(zmq::context_t& ctx, const ServerOptions& so) {
  Curve c;
  if (so.curve_secret_key_file.empty()) return c;
  auto key = wire::ReadKeyFile(so.curve_secret_key_file);
  if (!key.ok()) return key.status();
  c.secret = *key;
  auto keys = wire::AuthorizedKeys::Read(so.curve_authorized_keys);
  if (!keys.ok()) return keys.status();
  c.auth = *keys;
  auto handler = wire::ZapHandler::Start(ctx, *std::move(keys));
  if (!handler.ok()) return handler.status();
  c.zap = std::move(*handler);
  return c;
}

// The ROUTER socket, bound (with CURVE when `curve` has keys); its endpoint in `endpoint`.
absl::Status Bind(zmq::socket_t& sock, const ServerOptions& so, const Curve& curve,
                  std::string* endpoint) {
  wire::ConfigureSocket(sock);
  sock.set(zmq::sockopt::router_mandatory, 1);
  if (curve.auth) {
    if (auto s = wire::MakeCurveServer(sock, curve.secret); !s.ok()) return s;
  }
  try {
    sock.bind(so.bind);
  } catch (const zmq::error_t& e) {
    return absl::UnavailableError(absl::StrCat("cannot bind ", so.bind, ": ", e.what()));
  }
  *endpoint = sock.get(zmq::sockopt::last_endpoint);
  return absl::OkStatus();
}

// --insecure, loudly: what is exposed and what that means, once at start.
void WarnInsecure(const ServerOptions& so) {
  if (!so.insecure) return;
  std::fprintf(stderr,
               "diloco-server: WARNING: --insecure: %s served WITHOUT CURVE on a non-loopback "
               "address: plaintext, and anyone who reaches it can read the model and push as any "
               "worker (docs/security.md)\n",
               absl::StrJoin(so.exposed, " and ").c_str());
}

// The diloco_insecure gauge, after the shard's own metrics.
std::string InsecureGauge(const ServerOptions& so, uint32_t shard) {
  return absl::StrCat(
      "# HELP diloco_insecure 1 while served without CURVE on a non-loopback address "
      "(--insecure).\n# TYPE diloco_insecure gauge\ndiloco_insecure{shard=\"",
      shard, "\"} ", so.insecure ? 1 : 0, "\n");
}

// Written whole (a rename), so whoever waits for the file reads the endpoint or nothing.
void WritePortFile(const std::string& path, const std::string& endpoint) {
  if (path.empty()) return;
  const std::string tmp = path + ".tmp";
  { std::ofstream(tmp) << endpoint << "\n"; }
  std::rename(tmp.c_str(), path.c_str());
}

// The progress line on stderr and its event, every --progress_interval.
void ReportProgress(const Shard& shard, EventLog& log) {
  std::fprintf(stderr, "%s\n", ProgressLine(shard).c_str());
  JsonObject ev;
  ev.Add("event", "progress").AddRaw("stats", shard.StatsJson());
  log.Write(ev);
}

// Machines following the event log hear of each new checkpoint failure cause and of the
// recovery; `noted` is the cause the log was last told of.
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

// Sends and clears `out`, counting the bytes sent and the replies to departed workers (they
// re-pull when they return).
void SendAll(zmq::socket_t& sock, Shard& shard, std::vector<Outgoing>& out) {
  for (auto& o : out) {
    uint64_t bytes = 0;
    for (const auto& p : o.payloads) bytes += p.size();
    auto s = o.checksums ? wire::SendWithChecksums(sock, o.header, std::move(o.payloads),
                                                   *o.checksums, &o.routing_id)
                         : wire::Send(sock, o.header, std::move(o.payloads), &o.routing_id);
    if (!s.ok())
      shard.CountUnroutable();
    else
      shard.CountBytesOut(bytes);
  }
  out.clear();
}

}  // namespace
}  // namespace diloco::server

int main(int argc, char** argv) {
  using namespace diloco;
  using namespace diloco::server;
  SetVersionFlag("diloco-server");
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
  const auto& zap = curve->zap;
  zmq::socket_t sock(ctx, zmq::socket_type::router);
  std::string endpoint;
  if (auto s = Bind(sock, so, *curve, &endpoint); !s.ok()) return Fail(s);
  auto log = EventLog::Open(so.metrics_jsonl);
  if (!log.ok()) return Fail(log.status());
  auto audit = AuditLog::Open(so.audit_jsonl);
  if (!audit.ok()) return Fail(audit.status());
  uint64_t applied_answers = 0;
  std::unique_ptr<MetricsHttpServer> http;
  if (!so.metrics_address.empty()) {
    auto h = MetricsHttpServer::Start(so.metrics_address);
    if (!h.ok()) return Fail(h.status());
    http = std::move(*h);
    std::fprintf(stderr, "diloco-server: Prometheus metrics on %s, port %d%s\n",
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
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  // Test only: the socket has been bound since before the store was opened; a recovery this
  // long takes connections (libzmq handshakes them) and reads nothing.
  if (so.test_read_delay > absl::ZeroDuration()) absl::SleepFor(so.test_read_delay);
  WritePortFile(so.port_file, endpoint);
  std::fprintf(stderr, "diloco-server: shard %u/%u on %s, %zu fragments, plan %016lx%s\n", index,
               so.shard.num_shards, endpoint.c_str(), shard.owned().size(),
               static_cast<unsigned long>(shard.plan_fingerprint()),
               auth ? absl::StrCat(", CURVE with ", auth->size(), " authorized keys").c_str()
                    : (so.insecure ? ", NO CURVE (--insecure)" : ", no CURVE (loopback only)"));

  audit->Started(shard);
  // Freed frames go back to the kernel after 2 s without a payload, once 64 MiB came in.
  HeapTrimPolicy trim(64 << 20, absl::Seconds(2));
  uint64_t update_bytes_seen = 0;  // Shard counters' update_bytes_delta at the last pass
  std::vector<Outgoing> out;
  absl::Time next_progress = absl::Now() + so.progress_interval;
  absl::Time next_metrics = absl::Now();
  absl::Time next_zap_note = absl::InfinitePast();
  std::string noted_checkpoint_error;  // the cause the event log was last told of
  while (!g_stop) {
    const absl::Duration wait = std::clamp(shard.NextDeadline() - absl::Now(), absl::ZeroDuration(),
                                           absl::Milliseconds(50));
    // The socket, and the checkpoint writer's signal that a write finished (its version may
    // now be published).
    zmq::pollitem_t items[2] = {{static_cast<void*>(sock), 0, ZMQ_POLLIN, 0},
                                {nullptr, shard.checkpoint_wake_fd(), ZMQ_POLLIN, 0}};
    try {
      zmq::poll(items, items[1].fd >= 0 ? 2 : 1,
                std::chrono::milliseconds(absl::ToInt64Milliseconds(wait)));
    } catch (const zmq::error_t& e) {
      if (e.num() == EINTR) continue;
      return Fail(absl::InternalError(e.what()));
    }
    // Take what has arrived for at most kReceiveBudget, then close due rounds and send:
    // heartbeats are answered every pass, however much payload is queued.
    // Refused handshakes reach no socket: the ZAP handler counts them (logged below).
    if (zap) shard.SetCurveRefused(zap->refused());
    const absl::Time pass_start = absl::Now();
    for (int budget = 0; budget < 256 && absl::Now() - pass_start < kReceiveBudget; ++budget) {
      auto frames = wire::TryRecvMultipart(sock);
      if (!frames) break;
      if (frames->size() < 2) continue;  // a ROUTER always prepends the routing id
      std::string rid(static_cast<const char*>((*frames)[0].data()), (*frames)[0].size());
      frames->erase(frames->begin());
      if (frames->size() > 1) {  // payload: heartbeats, pulls and Stats do not count
        uint64_t bytes = 0;
        for (const auto& f : *frames) bytes += f.size();
        trim.Received(bytes, pass_start);
      }
      wire::MessageIds claimed;
      if (auth) {
        if (auto s = CheckKeyBinding(*auth, (*frames)[0], &claimed); !s.ok()) {
          shard.RefuseUnbound(rid, s, claimed, &out);
          continue;
        }
      }
      shard.Handle(rid, std::move(*frames), &out);
    }
    shard.Tick(&out);
    // Quantized updates live in heap buffers freed once sent: the same churn as received frames
    // (in per-round mode they go out after the checkpoint, possibly after the last push's trim).
    if (const uint64_t sent = shard.counters().update_bytes_delta; sent != update_bytes_seen) {
      trim.Received(sent - update_bytes_seen, absl::Now());
      update_bytes_seen = sent;
    }
    if (trim.Due(absl::Now())) {
      wire::TrimFrameHeap();
      trim.Trimmed();
    }
    if (zap && absl::Now() >= next_zap_note) {
      if (auto note = zap->TakeRefusalNote()) {  // at most one line per interval
        std::fprintf(stderr, "diloco-server[%u]: %s\n", index, note->c_str());
        next_zap_note = absl::Now() + Shard::kRefusalLogInterval;
      }
    }
    for (const auto& line : shard.TakeLogLines())
      std::fprintf(stderr, "diloco-server[%u]: %s\n", index, line.c_str());
    NoteCheckpointError(shard.counters(), *log, &noted_checkpoint_error);
    applied_answers += audit->Answers(shard, out);
    if (so.test_kill_after_applied > 0 && applied_answers >= so.test_kill_after_applied) {
      std::fprintf(stderr,
                   "diloco-server[%u]: --test_kill_after_applied: killed with %zu "
                   "answers unsent\n",
                   index, out.size());
      std::raise(SIGKILL);
    }
    SendAll(sock, shard, out);
    if (http && absl::Now() >= next_metrics) {
      next_metrics = absl::Now() + absl::Milliseconds(500);
      http->Publish(PrometheusText(shard) + InsecureGauge(so, index));
    }
    if (absl::Now() >= next_progress) {
      next_progress = absl::Now() + so.progress_interval;
      ReportProgress(shard, *log);
    }
  }
  auto s = shard.CheckpointNow();
  JsonObject ev;
  ev.Add("event", "shutdown").Add("final_checkpoint", s.ok() ? "written" : "failed");
  ev.AddRaw("stats", shard.StatsJson());
  log->Write(ev);
  std::fprintf(stderr, "diloco-server[%u]: stopping, final checkpoint %s; %s\n", index,
               s.ok() ? "written" : std::string(s.message()).c_str(), shard.StatsJson().c_str());
  return s.ok() ? 0 : 1;
}
