// diloco-server's serving loop (serve_loop.h).
#include "server/serve_loop.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "common/log.h"
#include "server/heap_trim.h"
#include "server/serve_report.h"

namespace diloco::server {
namespace {

// The longest one pass of the event loop spends taking messages in before it closes due
// rounds and sends what is ready (Shard::Tick has its own close budget).
constexpr absl::Duration kReceiveBudget = absl::Milliseconds(50);

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }
bool StopRequested() { return g_stop != 0; }

int Fail(const absl::Status& s) {
  Logf(LogLevel::kError, "diloco-server: %s", std::string(s.message()).c_str());
  return 2;
}

}  // namespace

void CatchStopSignals() {
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
}

int Serve(const ServeParts& parts) {
  const ServerOptions& so = parts.options;
  const uint32_t index = so.shard.shard;
  zmq::socket_t& sock = parts.sock;
  const auto& auth = parts.curve.auth;
  const auto& zap = parts.curve.zap;
  Shard& shard = parts.shard;
  EventLog& log = parts.log;
  AuditLog& audit = parts.audit;
  MetricsHttpServer* const http = parts.http;
  uint64_t applied_answers = 0;
  // Freed frames go back to the kernel after 2 s without a payload, once 64 MiB came in.
  HeapTrimPolicy trim(64 << 20, absl::Seconds(2));
  uint64_t update_bytes_seen = 0;  // Shard counters' update_bytes_delta at the last pass
  std::vector<Outgoing> out;
  absl::Time next_progress = absl::Now() + so.progress_interval;
  absl::Time next_metrics = absl::Now();
  absl::Time next_zap_note = absl::InfinitePast();
  std::string noted_checkpoint_error;  // the cause the event log was last told of
  while (!StopRequested()) {
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
        Logf(LogLevel::kWarning, "diloco-server[%u]: %s", index, note->c_str());
        next_zap_note = absl::Now() + Shard::kRefusalLogInterval;
      }
    }
    for (const auto& line : shard.TakeLogLines())
      Logf(LogLevel::kInfo, "diloco-server[%u]: %s", index, line.c_str());
    NoteCheckpointError(shard.counters(), log, &noted_checkpoint_error);
    applied_answers += audit.Answers(shard, out);
    if (so.faults && so.faults->kill_after_applied > 0 &&
        applied_answers >= so.faults->kill_after_applied) {
      Logf(LogLevel::kInfo,
           "diloco-server[%u]: --test_kill_after_applied: killed with %zu "
           "answers unsent",
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
      ReportProgress(shard, log);
    }
  }
  auto s = shard.CheckpointNow();
  JsonObject ev;
  ev.Add("event", "shutdown").Add("final_checkpoint", s.ok() ? "written" : "failed");
  ev.AddRaw("stats", shard.StatsJson());
  log.Write(ev);
  Logf(LogLevel::kInfo, "diloco-server[%u]: stopping, final checkpoint %s; %s", index,
       s.ok() ? "written" : std::string(s.message()).c_str(), shard.StatsJson().c_str());
  return s.ok() ? 0 : 1;
}

}  // namespace diloco::server
