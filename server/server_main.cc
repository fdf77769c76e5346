// diloco-server: one outer-optimizer shard. Binds a ROUTER socket, feeds every message to the
// Shard, sends its replies, closes rounds on time, and writes a final checkpoint on
// SIGTERM/SIGINT.
#include <csignal>
#include <cstdio>
#include <fstream>
#include <memory>
#include <optional>
#include <zmq.hpp>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/event_log.h"
#include "common/model_spec.h"
#include "kernels/codec.h"
#include "schema/curve.h"
#include "schema/transport.h"
#include "server/audit_log.h"
#include "server/heap_trim.h"
#include "server/metrics.h"
#include "server/shard.h"

ABSL_FLAG(std::string, bind, "tcp://127.0.0.1:5555",
          "ZeroMQ endpoint to bind; a port of * picks a free one (see --port_file)");
ABSL_FLAG(std::string, port_file, "", "write the bound endpoint here once listening");
ABSL_FLAG(uint32_t, shard, 0, "this shard's index");
ABSL_FLAG(uint32_t, shards, 1, "number of shards");
ABSL_FLAG(uint32_t, fragments, 4, "number of fragments the parameters are cut into");
ABSL_FLAG(std::string, model, "small", "model preset or spec (see common/model_spec.h)");
ABSL_FLAG(std::string, store, "", "RocksDB checkpoint directory (empty: no persistence)");
ABSL_FLAG(bool, accept_store_rollback, false,
          "start from the newest intact checkpoint of a --store whose recovery lost committed "
          "checkpoints (a damaged, cut or deleted write-ahead log) instead of refusing to start; "
          "versions workers adopted may then be published again with other contents");
ABSL_FLAG(std::string, durability, "periodic", "periodic or per-round");
ABSL_FLAG(uint32_t, checkpoint_every_rounds, 20, "periodic mode: rounds between checkpoints");
ABSL_FLAG(absl::Duration, checkpoint_interval, absl::Seconds(30),
          "periodic mode: time between checkpoints");
ABSL_FLAG(uint32_t, quorum, 1, "K: pushes before a round may close");
ABSL_FLAG(absl::Duration, grace_cap, absl::Seconds(5), "no round stays open longer than this");
ABSL_FLAG(double, grace_gamma, 1.0,
          "adaptive grace window factor: a round waits this many fleet push cadences (less the "
          "time to its quorum) for the workers not yet in it");
ABSL_FLAG(std::string, weights, "tokens2_over_steps", "tokens2_over_steps, tokens or uniform");
ABSL_FLAG(double, staleness_alpha, 0.0, "staleness discount (1+s)^-alpha; 0 = off");
ABSL_FLAG(std::string, outer, "rounds",
          "rounds (one Nesterov step per merged round) or delayed-nesterov (per arrival)");
ABSL_FLAG(int, dn_period, 4, "delayed-nesterov: arrivals per momentum update (N)");
ABSL_FLAG(std::string, merge, "mean", "merge rule of a round: mean (weighted) or rda");
ABSL_FLAG(std::string, round_norm, "expected",
          "what a round's weighted sum is divided by: expected (its weight plus the expected "
          "weight of each live worker missing from it, an absent worker counting as a zero "
          "delta) or arrived (its own weight: one lone push takes a whole step)");
ABSL_FLAG(
    std::string, round_step, "partial",
    "how far a round's Nesterov step goes: partial (a round holding a share s of a full "
    "round's work advances the momentum by s of a step), composed (the same, such that rounds "
    "adding up to a full round take exactly one Nesterov step) or full (a whole step each)");
ABSL_FLAG(double, test_drop_pushes, 0,
          "test flag: ack this fraction of pushes (at random, seeded) without merging them");
ABSL_FLAG(int, apply_threads, 2,
          "threads that decode and merge pushes, pinned by fragment (0: on the I/O thread)");
ABSL_FLAG(uint64_t, max_staleness, 16, "pushes staler than this are refused");
ABSL_FLAG(uint64_t, worker_credit_mib, 1024,
          "flow control: push MiB one worker may have held in open rounds at once (one push is "
          "always allowed); 0 = no byte limit beyond one push per fragment");
ABSL_FLAG(double, outer_lr, 1.3, "outer Nesterov learning rate");
ABSL_FLAG(double, outer_momentum, 0.7, "outer Nesterov momentum");
ABSL_FLAG(std::string, download_codec, "int8",
          "how new versions travel to workers: fp32 (whole fragments), or int8 / int4 [:block] "
          "(quantized updates from the previous version, error feedback on the shard; joins and "
          "pulls still get whole fragments)");
ABSL_FLAG(uint32_t, download_chain, 4,
          "quantized downloads: updates kept per fragment for workers a few versions behind");
ABSL_FLAG(absl::Duration, worker_timeout, absl::Seconds(10),
          "a worker silent this long is not live");
ABSL_FLAG(absl::Duration, progress_interval, absl::Seconds(5), "progress line period");
ABSL_FLAG(std::string, curve_secret_key_file, "",
          "CURVE: this server's secret key file (diloco-keygen); empty: no encryption");
ABSL_FLAG(std::string, curve_authorized_keys, "",
          "CURVE: file of \"worker_id z85-public-key\" lines; only these keys may connect, and "
          "each only as its worker id (required with --curve_secret_key_file)");
ABSL_FLAG(std::string, metrics_jsonl, "", "append JSON-lines events (progress, shutdown) here");
ABSL_FLAG(std::string, audit_jsonl, "",
          "append one JSON line per promise here before it is made: the versions recovered at "
          "each start, each Applied answer (worker, generation, fragment, seq, version) and "
          "each theta(0) accepted (server/audit_log.h)");
ABSL_FLAG(uint64_t, test_kill_after_applied, 0,
          "test flag: SIGKILL this process once this many Applied answers are ready, after "
          "they are durable (per-round) and audited but before any of them is sent; 0 = never");
ABSL_FLAG(std::string, metrics_address, "",
          "serve Prometheus text on http://HOST:PORT/metrics (e.g. 127.0.0.1:9464; port 0 picks)");

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
absl::Status CheckKeyBinding(const diloco::wire::AuthorizedKeys& keys, zmq::message_t& header_frame,
                             diloco::wire::MessageIds* claimed) {
  using namespace diloco::wire;
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

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("diloco-server --shard=I --shards=S --store=DIR [flags]");
  absl::ParseCommandLine(argc, argv);
  using namespace diloco;
  using namespace diloco::server;
  wire::TuneAllocatorForFrames();
  wire::UseOneMallocArena();

  ShardOptions o;
  o.shard = absl::GetFlag(FLAGS_shard);
  o.num_shards = absl::GetFlag(FLAGS_shards);
  o.num_fragments = absl::GetFlag(FLAGS_fragments);
  auto model = ParseGptConfig(absl::GetFlag(FLAGS_model));
  if (!model.ok()) return Fail(model.status());
  o.model = *model;
  o.store_path = absl::GetFlag(FLAGS_store);
  o.accept_store_rollback = absl::GetFlag(FLAGS_accept_store_rollback);
  const std::string dur = absl::GetFlag(FLAGS_durability);
  if (dur == "periodic")
    o.durability = Durability::kPeriodic;
  else if (dur == "per-round")
    o.durability = Durability::kPerRound;
  else
    return Fail(absl::InvalidArgumentError("--durability must be periodic or per-round"));
  o.checkpoint_every_rounds = absl::GetFlag(FLAGS_checkpoint_every_rounds);
  o.checkpoint_interval = absl::GetFlag(FLAGS_checkpoint_interval);
  o.round.quorum = absl::GetFlag(FLAGS_quorum);
  o.round.grace_cap = absl::GetFlag(FLAGS_grace_cap);
  o.round.gamma = absl::GetFlag(FLAGS_grace_gamma);
  auto weights = ParseWeightScheme(absl::GetFlag(FLAGS_weights));
  if (!weights.ok()) return Fail(weights.status());
  o.weights = *weights;
  o.staleness_alpha = absl::GetFlag(FLAGS_staleness_alpha);
  const std::string outer = absl::GetFlag(FLAGS_outer), merge = absl::GetFlag(FLAGS_merge);
  if (outer == "rounds")
    o.outer_mode = OuterMode::kRounds;
  else if (outer == "delayed-nesterov")
    o.outer_mode = OuterMode::kDelayedNesterov;
  else
    return Fail(absl::InvalidArgumentError("--outer must be rounds or delayed-nesterov"));
  o.dn_period = absl::GetFlag(FLAGS_dn_period);
  o.apply_threads = absl::GetFlag(FLAGS_apply_threads);
  if (merge == "mean")
    o.merge = MergeRule::kWeightedMean;
  else if (merge == "rda")
    o.merge = MergeRule::kRda;
  else
    return Fail(absl::InvalidArgumentError("--merge must be mean or rda"));
  const std::string norm = absl::GetFlag(FLAGS_round_norm);
  if (norm == "expected")
    o.norm = RoundNorm::kExpected;
  else if (norm == "arrived")
    o.norm = RoundNorm::kArrived;
  else
    return Fail(absl::InvalidArgumentError("--round_norm must be expected or arrived"));
  const std::string step = absl::GetFlag(FLAGS_round_step);
  if (step == "partial")
    o.step = RoundStep::kPartial;
  else if (step == "composed")
    o.step = RoundStep::kComposed;
  else if (step == "full")
    o.step = RoundStep::kFull;
  else
    return Fail(absl::InvalidArgumentError("--round_step must be partial, composed or full"));
  o.test_drop_pushes = absl::GetFlag(FLAGS_test_drop_pushes);
  o.max_staleness = absl::GetFlag(FLAGS_max_staleness);
  o.worker_credit_bytes = absl::GetFlag(FLAGS_worker_credit_mib) << 20;
  o.outer.lr = static_cast<float>(absl::GetFlag(FLAGS_outer_lr));
  o.outer.mu = static_cast<float>(absl::GetFlag(FLAGS_outer_momentum));
  o.worker_timeout = absl::GetFlag(FLAGS_worker_timeout);
  auto download = kernels::ParseCodec(absl::GetFlag(FLAGS_download_codec));
  if (!download.ok())
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--download_codec: ", download.status().message())));
  o.download = *download;
  o.download_chain = absl::GetFlag(FLAGS_download_chain);

  zmq::context_t ctx(1);
  // CURVE: the ZAP handler must answer before the socket accepts its first connection.
  std::optional<wire::AuthorizedKeys> auth;
  std::unique_ptr<wire::ZapHandler> zap;
  std::string curve_secret;
  if (const auto f = absl::GetFlag(FLAGS_curve_secret_key_file); !f.empty()) {
    auto key = wire::ReadKeyFile(f);
    if (!key.ok()) return Fail(key.status());
    curve_secret = *key;
    const auto af = absl::GetFlag(FLAGS_curve_authorized_keys);
    if (af.empty())
      return Fail(absl::InvalidArgumentError(
          "--curve_authorized_keys is required with --curve_secret_key_file"));
    auto keys = wire::AuthorizedKeys::Read(af);
    if (!keys.ok()) return Fail(keys.status());
    auth = *keys;
    auto handler = wire::ZapHandler::Start(ctx, *std::move(keys));
    if (!handler.ok()) return Fail(handler.status());
    zap = std::move(*handler);
  } else if (!absl::GetFlag(FLAGS_curve_authorized_keys).empty()) {
    return Fail(
        absl::InvalidArgumentError("--curve_authorized_keys needs --curve_secret_key_file"));
  }
  zmq::socket_t sock(ctx, zmq::socket_type::router);
  wire::ConfigureSocket(sock);
  sock.set(zmq::sockopt::router_mandatory, 1);
  if (auth) {
    if (auto s = wire::MakeCurveServer(sock, curve_secret); !s.ok()) return Fail(s);
  }
  try {
    sock.bind(absl::GetFlag(FLAGS_bind));
  } catch (const zmq::error_t& e) {
    return Fail(absl::UnavailableError(
        absl::StrCat("cannot bind ", absl::GetFlag(FLAGS_bind), ": ", e.what())));
  }
  const std::string endpoint = sock.get(zmq::sockopt::last_endpoint);
  auto log = EventLog::Open(absl::GetFlag(FLAGS_metrics_jsonl));
  if (!log.ok()) return Fail(log.status());
  auto audit = AuditLog::Open(absl::GetFlag(FLAGS_audit_jsonl));
  if (!audit.ok()) return Fail(audit.status());
  const uint64_t kill_after_applied = absl::GetFlag(FLAGS_test_kill_after_applied);
  uint64_t applied_answers = 0;
  std::unique_ptr<MetricsHttpServer> http;
  if (const auto addr = absl::GetFlag(FLAGS_metrics_address); !addr.empty()) {
    auto h = MetricsHttpServer::Start(addr);
    if (!h.ok()) return Fail(h.status());
    http = std::move(*h);
    std::fprintf(stderr, "diloco-server: Prometheus metrics on port %d\n", http->port());
  }
  // The store is opened (or created) last, once every other input has been accepted: a start
  // refused for a bad flag, key file or address leaves no store behind.
  SystemClock clock;
  auto shard = Shard::Create(o, &clock);
  if (!shard.ok()) return Fail(shard.status());
  // Handlers before the port file: whoever waits for the port file may signal at once (Slurm's
  // srun forwards SIGINT; an unhandled one would kill the shard without its final checkpoint).
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  if (const auto pf = absl::GetFlag(FLAGS_port_file); !pf.empty()) {
    const std::string tmp = pf + ".tmp";
    { std::ofstream(tmp) << endpoint << "\n"; }
    std::rename(tmp.c_str(), pf.c_str());
  }
  std::fprintf(stderr, "diloco-server: shard %u/%u on %s, %zu fragments, plan %016lx%s\n", o.shard,
               o.num_shards, endpoint.c_str(), (*shard)->owned().size(),
               static_cast<unsigned long>((*shard)->plan_fingerprint()),
               auth ? absl::StrCat(", CURVE with ", auth->size(), " authorized keys").c_str()
                    : ", no CURVE");

  audit->Started(**shard);
  // Freed frames go back to the kernel after 2 s without a payload, once 64 MiB came in.
  HeapTrimPolicy trim(64 << 20, absl::Seconds(2));
  uint64_t update_bytes_seen = 0;  // Shard counters' update_bytes_delta at the last pass
  std::vector<Outgoing> out;
  absl::Time next_progress = absl::Now() + absl::GetFlag(FLAGS_progress_interval);
  absl::Time next_metrics = absl::Now();
  absl::Time next_zap_note = absl::InfinitePast();
  std::string noted_checkpoint_error;  // the cause the event log was last told of
  while (!g_stop) {
    const absl::Duration wait = std::clamp((*shard)->NextDeadline() - absl::Now(),
                                           absl::ZeroDuration(), absl::Milliseconds(50));
    // The socket, and the checkpoint writer's signal that a write finished (its version may
    // now be published).
    zmq::pollitem_t items[2] = {{static_cast<void*>(sock), 0, ZMQ_POLLIN, 0},
                                {nullptr, (*shard)->checkpoint_wake_fd(), ZMQ_POLLIN, 0}};
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
    if (zap) (*shard)->SetCurveRefused(zap->refused());
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
          (*shard)->RefuseUnbound(rid, s, claimed, &out);
          continue;
        }
      }
      (*shard)->Handle(rid, std::move(*frames), &out);
    }
    (*shard)->Tick(&out);
    // Quantized updates live in heap buffers freed once sent: the same churn as received frames
    // (in per-round mode they go out after the checkpoint, possibly after the last push's trim).
    if (const uint64_t sent = (*shard)->counters().update_bytes_delta; sent != update_bytes_seen) {
      trim.Received(sent - update_bytes_seen, absl::Now());
      update_bytes_seen = sent;
    }
    if (trim.Due(absl::Now())) {
      wire::TrimFrameHeap();
      trim.Trimmed();
    }
    if (zap && absl::Now() >= next_zap_note) {
      if (auto note = zap->TakeRefusalNote()) {  // at most one line per interval
        std::fprintf(stderr, "diloco-server[%u]: %s\n", o.shard, note->c_str());
        next_zap_note = absl::Now() + Shard::kRefusalLogInterval;
      }
    }
    for (const auto& line : (*shard)->TakeLogLines())
      std::fprintf(stderr, "diloco-server[%u]: %s\n", o.shard, line.c_str());
    if (const auto& c = (*shard)->counters(); c.checkpoint_error != noted_checkpoint_error) {
      // Machines following the event log hear of each new cause and of the recovery.
      JsonObject ev;
      ev.Add("event", c.checkpoint_error.empty() ? "checkpoint_recovered" : "checkpoint_failed")
          .Add("failures", c.checkpoint_failures);
      if (!c.checkpoint_error.empty())
        ev.Add("code", c.checkpoint_error_code).Add("error", c.checkpoint_error);
      log->Write(ev);
      noted_checkpoint_error = c.checkpoint_error;
    }
    applied_answers += audit->Answers(**shard, out);
    if (kill_after_applied > 0 && applied_answers >= kill_after_applied) {
      std::fprintf(stderr,
                   "diloco-server[%u]: --test_kill_after_applied: killed with %zu "
                   "answers unsent\n",
                   o.shard, out.size());
      std::raise(SIGKILL);
    }
    for (auto& o : out) {
      uint64_t bytes = 0;
      for (const auto& p : o.payloads) bytes += p.size();
      auto s = o.checksums ? wire::SendWithChecksums(sock, o.header, std::move(o.payloads),
                                                     *o.checksums, &o.routing_id)
                           : wire::Send(sock, o.header, std::move(o.payloads), &o.routing_id);
      if (!s.ok())
        (*shard)->CountUnroutable();  // a departed worker: it re-pulls when it returns
      else
        (*shard)->CountBytesOut(bytes);
    }
    out.clear();
    if (http && absl::Now() >= next_metrics) {
      next_metrics = absl::Now() + absl::Milliseconds(500);
      http->Publish(PrometheusText(**shard));
    }
    if (absl::Now() >= next_progress) {
      next_progress = absl::Now() + absl::GetFlag(FLAGS_progress_interval);
      std::fprintf(stderr, "%s\n", ProgressLine(**shard).c_str());
      JsonObject ev;
      ev.Add("event", "progress").AddRaw("stats", (*shard)->StatsJson());
      log->Write(ev);
    }
  }
  auto s = (*shard)->CheckpointNow();
  JsonObject ev;
  ev.Add("event", "shutdown").Add("final_checkpoint", s.ok() ? "written" : "failed");
  ev.AddRaw("stats", (*shard)->StatsJson());
  log->Write(ev);
  std::fprintf(stderr, "diloco-server[%u]: stopping, final checkpoint %s; %s\n", o.shard,
               s.ok() ? "written" : std::string(s.message()).c_str(),
               (*shard)->StatsJson().c_str());
  return s.ok() ? 0 : 1;
}
