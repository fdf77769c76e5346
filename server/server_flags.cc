#include "server/server_flags.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cmath>
#include <utility>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "common/plan_flags.h"
#include "kernels/codec.h"

namespace diloco::server {
namespace {

constexpr Choice<Durability> kDurabilities[] = {{"periodic", Durability::kPeriodic},
                                                {"per-round", Durability::kPerRound}};
constexpr Choice<OuterMode> kOuterModes[] = {{"rounds", OuterMode::kRounds},
                                             {"delayed-nesterov", OuterMode::kDelayedNesterov}};
constexpr Choice<MergeRule> kMergeRules[] = {{"mean", MergeRule::kWeightedMean},
                                             {"rda", MergeRule::kRda}};
constexpr Choice<MergeOrder> kMergeOrders[] = {{"arrival", MergeOrder::kArrival},
                                               {"worker", MergeOrder::kWorker}};
constexpr Choice<RoundNorm> kRoundNorms[] = {{"expected", RoundNorm::kExpected},
                                             {"arrived", RoundNorm::kArrived}};
constexpr Choice<RoundStep> kRoundSteps[] = {{"partial", RoundStep::kPartial},
                                             {"composed", RoundStep::kComposed},
                                             {"full", RoundStep::kFull}};
// "default" is also read, as tokens2_over_steps (ParseWeightScheme).
constexpr Choice<WeightScheme> kWeightSchemes[] = {
    {"tokens2_over_steps", WeightScheme::kTokensSqOverSteps},
    {"tokens", WeightScheme::kTokens},
    {"uniform", WeightScheme::kUniform}};

}  // namespace

bool AbslParseFlag(absl::string_view text, Durability* v, std::string* error) {
  return ParseChoice(text, kDurabilities, v, error);
}
std::string AbslUnparseFlag(Durability v) { return UnparseChoice(v, kDurabilities); }
bool AbslParseFlag(absl::string_view text, OuterMode* v, std::string* error) {
  return ParseChoice(text, kOuterModes, v, error);
}
std::string AbslUnparseFlag(OuterMode v) { return UnparseChoice(v, kOuterModes); }
bool AbslParseFlag(absl::string_view text, MergeRule* v, std::string* error) {
  return ParseChoice(text, kMergeRules, v, error);
}
std::string AbslUnparseFlag(MergeRule v) { return UnparseChoice(v, kMergeRules); }
bool AbslParseFlag(absl::string_view text, MergeOrder* v, std::string* error) {
  return ParseChoice(text, kMergeOrders, v, error);
}
std::string AbslUnparseFlag(MergeOrder v) { return UnparseChoice(v, kMergeOrders); }
bool AbslParseFlag(absl::string_view text, RoundNorm* v, std::string* error) {
  return ParseChoice(text, kRoundNorms, v, error);
}
std::string AbslUnparseFlag(RoundNorm v) { return UnparseChoice(v, kRoundNorms); }
bool AbslParseFlag(absl::string_view text, RoundStep* v, std::string* error) {
  return ParseChoice(text, kRoundSteps, v, error);
}
std::string AbslUnparseFlag(RoundStep v) { return UnparseChoice(v, kRoundSteps); }
bool AbslParseFlag(absl::string_view text, WeightScheme* v, std::string* error) {
  if (text == "default") text = "tokens2_over_steps";
  return ParseChoice(text, kWeightSchemes, v, error);
}
std::string AbslUnparseFlag(WeightScheme v) { return UnparseChoice(v, kWeightSchemes); }

}  // namespace diloco::server

using diloco::server::Durability;
using diloco::server::MergeOrder;
using diloco::server::MergeRule;
using diloco::server::OuterMode;
using diloco::server::RoundNorm;
using diloco::server::RoundStep;
using diloco::server::WeightScheme;

ABSL_FLAG(std::string, bind, "tcp://127.0.0.1:5555",
          "ZeroMQ endpoint to bind; a port of * picks a free one (see --port_file)");
ABSL_FLAG(std::string, port_file, "", "write the bound endpoint here once listening");
ABSL_FLAG(uint32_t, shard, 0, "this shard's index, 0 .. --shards-1");
ABSL_FLAG(std::string, store, "", "RocksDB checkpoint directory (empty: no persistence)");
ABSL_FLAG(bool, accept_store_rollback, false,
          "start from the newest intact checkpoint of a --store whose recovery lost committed "
          "checkpoints (a damaged, cut or deleted write-ahead log) instead of refusing to start; "
          "versions workers adopted may then be published again with other contents");
ABSL_FLAG(Durability, durability, Durability::kPeriodic, "periodic or per-round");
ABSL_FLAG(uint32_t, checkpoint_every_rounds, 20, "periodic mode: rounds between checkpoints");
ABSL_FLAG(absl::Duration, checkpoint_interval, absl::Seconds(30),
          "periodic mode: time between checkpoints");
ABSL_FLAG(uint32_t, quorum, 1, "K: pushes before a round may close (or --grace_cap)");
ABSL_FLAG(bool, elastic_quorum, false,
          "a round short of --quorum also closes once every live worker (heard from within "
          "--worker_timeout) has pushed: the quorum re-forms around the live workers");
ABSL_FLAG(absl::Duration, grace_cap, absl::Seconds(5), "no round stays open longer than this");
ABSL_FLAG(double, grace_gamma, 1.0,
          "adaptive grace window factor: a round waits this many fleet push cadences (less the "
          "time to its quorum) for the workers not yet in it");
ABSL_FLAG(WeightScheme, weights, WeightScheme::kTokensSqOverSteps,
          "tokens2_over_steps, tokens or uniform");
ABSL_FLAG(double, staleness_alpha, 0.0, "staleness discount (1+s)^-alpha; 0 = off");
ABSL_FLAG(OuterMode, outer, OuterMode::kRounds,
          "rounds (one Nesterov step per merged round) or delayed-nesterov (per arrival)");
ABSL_FLAG(int, dn_period, 4, "delayed-nesterov: arrivals per momentum update (N)");
ABSL_FLAG(MergeRule, merge, MergeRule::kWeightedMean,
          "merge rule of a round: mean (weighted) or rda");
ABSL_FLAG(MergeOrder, merge_order, MergeOrder::kArrival,
          "order a round's pushes are merged in: arrival (each as it arrives) or worker (held "
          "until the round closes, then by worker id: the same pushes give the same bits "
          "whatever their arrival order, so a --lockstep fleet is reproducible run to run)");
ABSL_FLAG(RoundNorm, round_norm, RoundNorm::kExpected,
          "what a round's weighted sum is divided by: expected (its weight plus the expected "
          "weight of each live worker missing from it, an absent worker counting as a zero "
          "delta) or arrived (its own weight: one lone push takes a whole step)");
ABSL_FLAG(RoundStep, round_step, RoundStep::kPartial,
          "how far a round's Nesterov step goes: partial (a round holding a share s of a full "
          "round's work advances the momentum by s of a step), composed (the same, such that "
          "rounds adding up to a full round take exactly one Nesterov step) or full (a whole "
          "step each)");
ABSL_FLAG(double, test_drop_pushes, 0,
          "test flag: ack this fraction of pushes (at random, seeded) without merging them");
ABSL_FLAG(uint64_t, test_drop_seed, 0,
          "test flag: the seed of --test_drop_pushes' draw (a push's fate is a hash of the seed, "
          "the shard, the worker's id, the fragment and the push's sequence number)");
ABSL_FLAG(int, apply_threads, 2,
          "threads that decode and merge pushes, pinned by fragment (0: on the I/O thread)");
ABSL_FLAG(uint64_t, max_staleness, 16, "pushes staler than this are refused");
ABSL_FLAG(double, push_steps_cap, 4,
          "push guard: a push claiming more than this many times the median steps of the "
          "fragment's last 32 accepted pushes (once 8 are known) is weighed as if it held that "
          "many steps, its tokens scaled alike; counted (pushes_weight_capped) and logged; 0 = "
          "off, else at least 1");
ABSL_FLAG(double, push_norm_cap, 4,
          "push guard: a push whose delta's L2 norm exceeds this many times the median norm of "
          "the fragment's last 32 accepted pushes (once 8 are known) is scaled down to that norm "
          "before it is merged; counted (pushes_norm_clipped) and logged; 0 = off, else at "
          "least 1");
ABSL_FLAG(uint64_t, worker_credit_mib, 1024,
          "flow control: push MiB one worker may have held in open rounds at once (one push is "
          "always allowed); 0 = no byte limit beyond one push per fragment");
ABSL_FLAG(absl::Duration, keep_cut_trains_for, absl::Minutes(5),
          "a push train cut by a lost connection is kept this long for the worker to resume "
          "from its first missing chunk after reconnecting (docs/protocol.md, \"Trains\")");
ABSL_FLAG(uint64_t, keep_cut_trains_mib, 256,
          "the most MiB of cut push trains kept at once, the oldest dropped first beyond it; "
          "0 keeps none (a cut push is sent again whole)");
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
          "each start, each Applied answer (worker, generation, fragment, seq, version, and the "
          "steps and tokens the push claimed) and "
          "each theta(0) accepted (server/audit_log.h)");
ABSL_FLAG(uint64_t, test_kill_after_applied, 0,
          "test flag: SIGKILL this process once this many Applied answers are ready, after "
          "they are durable (per-round) and audited but before any of them is sent; 0 = never");
ABSL_FLAG(absl::Duration, test_read_delay, absl::ZeroDuration(),
          "test flag: after the store is recovered, wait this long before reading the socket, "
          "which is bound all the while (a slow recovery: connections are taken, nothing read)");
ABSL_FLAG(std::string, metrics_address, "",
          "serve Prometheus text on http://HOST:PORT/metrics; a bare PORT (or :PORT) listens on "
          "127.0.0.1 "
          "(e.g. 9464; port 0 picks); another host only when named (0.0.0.0:9464: plaintext, "
          "unauthenticated, and without CURVE keys only with --insecure)");
ABSL_FLAG(bool, insecure, false,
          "allow a non-loopback --bind or --metrics_address without CURVE keys: plaintext, and "
          "anyone who reaches the port can read the model and push as any worker (reported at "
          "start, in Stats as \"insecure\" and as the diloco_insecure gauge)");

namespace diloco::server {

bool IsLoopbackHost(absl::string_view host) {
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']')
    host = host.substr(1, host.size() - 2);
  if (absl::AsciiStrToLower(host) == "localhost") return true;
  const std::string h(host);
  in_addr v4;
  if (inet_pton(AF_INET, h.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6;
  return inet_pton(AF_INET6, h.c_str(), &v6) == 1 && IN6_IS_ADDR_LOOPBACK(&v6);
}

bool IsLoopbackEndpoint(absl::string_view endpoint) {
  if (absl::StartsWith(endpoint, "ipc://") || absl::StartsWith(endpoint, "inproc://")) return true;
  if (!absl::ConsumePrefix(&endpoint, "tcp://")) return false;
  const size_t colon = endpoint.rfind(':');
  return colon != absl::string_view::npos && IsLoopbackHost(endpoint.substr(0, colon));
}

namespace {

// --metrics_address with a bare port (PORT or :PORT) made 127.0.0.1's; its host, for the
// exposure check.
std::string MetricsAddress(const std::string& flag, std::string* host) {
  const size_t colon = flag.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    *host = "127.0.0.1";
    return flag.empty() ? flag : "127.0.0.1:" + flag.substr(colon == 0 ? 1 : 0);
  }
  *host = flag.substr(0, colon);
  return flag;
}

// Without CURVE, a non-loopback address needs --insecure; with it, `s` says what is exposed.
absl::Status CheckExposure(ServerOptions& s, const std::string& metrics_host) {
  const bool curve = !s.curve_secret_key_file.empty();
  const bool insecure = absl::GetFlag(FLAGS_insecure);
  if (curve && insecure)
    return absl::InvalidArgumentError(
        "--insecure contradicts --curve_secret_key_file (CURVE is on): give one of them");
  if (curve) return absl::OkStatus();
  if (!IsLoopbackEndpoint(s.bind)) s.exposed.push_back("--bind=" + s.bind);
  if (!s.metrics_address.empty() && !IsLoopbackHost(metrics_host))
    s.exposed.push_back("--metrics_address=" + s.metrics_address);
  if (s.exposed.empty() || insecure) {
    s.insecure = !s.exposed.empty();
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      absl::StrJoin(s.exposed, " and "),
      ": not a loopback address, and this shard has no CURVE keys: anyone who reaches it could ",
      IsLoopbackEndpoint(s.bind) ? "read the shard's metrics"
                                 : "read the model and push as any worker",
      ". Either give --curve_secret_key_file and "
      "--curve_authorized_keys (diloco-ctl keys --out=DIR --workers=N makes them; "
      "docs/security.md), or --insecure to serve in the clear anyway"));
}

}  // namespace

void ParseServerFlags(int argc, char** argv) {
  absl::SetProgramUsageMessage("diloco-server --shard=I --shards=S --store=DIR [flags]");
  ParseFlags(argc, argv, "", {"server/server_flags.cc"});
}

absl::StatusOr<ServerOptions> ServerOptionsFromFlags() {
  auto plan = PlanFromFlags();
  if (!plan.ok()) return plan.status();
  ServerOptions s;
  ShardOptions& o = s.shard;
  o.shard = absl::GetFlag(FLAGS_shard);
  o.num_shards = plan->num_shards;
  o.num_fragments = plan->num_fragments;
  if (plan->gpt) o.model = *plan->gpt;
  o.manifest = plan->manifest;
  o.model_spec = plan->model_spec;
  if (o.shard >= o.num_shards)
    return absl::InvalidArgumentError(
        absl::StrCat("--shard=", o.shard, ": out of range for --shards=", o.num_shards));
  o.store_path = absl::GetFlag(FLAGS_store);
  o.accept_store_rollback = absl::GetFlag(FLAGS_accept_store_rollback);
  o.durability = absl::GetFlag(FLAGS_durability);
  o.checkpoint_every_rounds = absl::GetFlag(FLAGS_checkpoint_every_rounds);
  o.checkpoint_interval = absl::GetFlag(FLAGS_checkpoint_interval);
  o.round.quorum = absl::GetFlag(FLAGS_quorum);
  o.round.elastic = absl::GetFlag(FLAGS_elastic_quorum);
  o.round.grace_cap = absl::GetFlag(FLAGS_grace_cap);
  o.round.gamma = absl::GetFlag(FLAGS_grace_gamma);
  o.weights = absl::GetFlag(FLAGS_weights);
  o.staleness_alpha = absl::GetFlag(FLAGS_staleness_alpha);
  o.outer_mode = absl::GetFlag(FLAGS_outer);
  o.dn_period = absl::GetFlag(FLAGS_dn_period);
  o.apply_threads = absl::GetFlag(FLAGS_apply_threads);
  o.merge = absl::GetFlag(FLAGS_merge);
  o.merge_order = absl::GetFlag(FLAGS_merge_order);
  o.norm = absl::GetFlag(FLAGS_round_norm);
  o.step = absl::GetFlag(FLAGS_round_step);
  o.test_drop_pushes = absl::GetFlag(FLAGS_test_drop_pushes);
  o.test_drop_seed = absl::GetFlag(FLAGS_test_drop_seed);
  o.max_staleness = absl::GetFlag(FLAGS_max_staleness);
  o.push_steps_cap = absl::GetFlag(FLAGS_push_steps_cap);
  o.push_norm_cap = absl::GetFlag(FLAGS_push_norm_cap);
  for (const auto& [name, cap] :
       {std::pair{"push_steps_cap", o.push_steps_cap}, std::pair{"push_norm_cap", o.push_norm_cap}})
    if (!(cap == 0 || (cap >= 1 && std::isfinite(cap))))
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, "=", cap, ": must be 0 (off) or at least 1 (x the median)"));
  o.worker_credit_bytes = absl::GetFlag(FLAGS_worker_credit_mib) << 20;
  o.keep_trains.time = absl::GetFlag(FLAGS_keep_cut_trains_for);
  o.keep_trains.bytes = absl::GetFlag(FLAGS_keep_cut_trains_mib) << 20;
  if (o.keep_trains.time < absl::ZeroDuration())
    return absl::InvalidArgumentError("--keep_cut_trains_for must not be negative");
  o.outer.lr = static_cast<float>(absl::GetFlag(FLAGS_outer_lr));
  o.outer.mu = static_cast<float>(absl::GetFlag(FLAGS_outer_momentum));
  o.worker_timeout = absl::GetFlag(FLAGS_worker_timeout);
  const std::string codec = absl::GetFlag(FLAGS_download_codec);
  auto download = kernels::ParseCodec(codec);
  if (!download.ok())
    return absl::InvalidArgumentError(
        absl::StrCat("--download_codec=", codec, ": ", download.status().message()));
  o.download = *download;
  o.download_chain = absl::GetFlag(FLAGS_download_chain);

  s.bind = absl::GetFlag(FLAGS_bind);
  s.port_file = absl::GetFlag(FLAGS_port_file);
  s.curve_secret_key_file = absl::GetFlag(FLAGS_curve_secret_key_file);
  s.curve_authorized_keys = absl::GetFlag(FLAGS_curve_authorized_keys);
  if (!s.curve_secret_key_file.empty() && s.curve_authorized_keys.empty())
    return absl::InvalidArgumentError(
        absl::StrCat("--curve_secret_key_file=", s.curve_secret_key_file,
                     ": needs --curve_authorized_keys too"));
  if (s.curve_secret_key_file.empty() && !s.curve_authorized_keys.empty())
    return absl::InvalidArgumentError("--curve_authorized_keys needs --curve_secret_key_file");
  s.metrics_jsonl = absl::GetFlag(FLAGS_metrics_jsonl);
  s.audit_jsonl = absl::GetFlag(FLAGS_audit_jsonl);
  std::string metrics_host;
  s.metrics_address = MetricsAddress(absl::GetFlag(FLAGS_metrics_address), &metrics_host);
  if (auto st = CheckExposure(s, metrics_host); !st.ok()) return st;
  o.insecure = s.insecure;
  s.progress_interval = absl::GetFlag(FLAGS_progress_interval);
  s.test_kill_after_applied = absl::GetFlag(FLAGS_test_kill_after_applied);
  s.test_read_delay = absl::GetFlag(FLAGS_test_read_delay);
  if (s.test_read_delay < absl::ZeroDuration())
    return absl::InvalidArgumentError(absl::StrCat(
        "--test_read_delay=", absl::FormatDuration(s.test_read_delay), ": must be >= 0"));
  return s;
}

}  // namespace diloco::server
