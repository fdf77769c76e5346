#include "server/server_flags.h"

#include <arpa/inet.h>
#include <netinet/in.h>

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
#include "server/flags/flags.h"
#include "server/shard_validate.h"

namespace diloco::server {
namespace {

constexpr Choice<Durability> kDurabilities[] = {{"periodic", Durability::kPeriodic},
                                                {"per-round", Durability::kPerRound}};
constexpr Choice<OuterMode> kOuterModes[] = {{"rounds", OuterMode::kRounds},
                                             {"delayed-nesterov", OuterMode::kDelayedNesterov}};
constexpr Choice<OuterChoice> kOuterChoices[] = {{"auto", OuterChoice::kAuto},
                                                 {"nesterov", OuterChoice::kNesterov},
                                                 {"sparse", OuterChoice::kSparse}};
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
bool AbslParseFlag(absl::string_view text, OuterChoice* v, std::string* error) {
  return ParseChoice(text, kOuterChoices, v, error);
}
std::string AbslUnparseFlag(OuterChoice v) { return UnparseChoice(v, kOuterChoices); }
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
  absl::SetProgramUsageMessage(
      "diloco-server --shard=I --shards=S --store=DIR [flags]\n\n"
      "One outer-optimizer shard of a DiLoCo fleet. Its flags, by group (the file that defines "
      "them):\n"
      "  server/flags/observability.cc  progress lines, events, audit log, Prometheus metrics\n"
      "  server/flags/rounds.cc         quorum, grace, weights, push guard, merge, outer step\n"
      "  server/flags/security.cc       CURVE keys and --insecure\n"
      "  server/flags/serving.cc        socket, shard index, threads, flow control, downloads\n"
      "  server/flags/storage.cc        the checkpoint store and its cadence\n"
      "  server/flags/test_only.cc      [test only] injected faults; never in production\n"
      "  common/plan_flags.cc           the plan: --model, --fragments, --shards");
  ParseFlags(argc, argv, "",
             {"server/flags/observability.cc", "server/flags/rounds.cc", "server/flags/security.cc",
              "server/flags/serving.cc", "server/flags/storage.cc", "server/flags/test_only.cc"});
}

absl::StatusOr<ServerOptions> ServerOptionsFromFlags() {
  auto plan = PlanFromFlags();
  if (!plan.ok()) return plan.status();
  ServerOptions s;
  ShardOptions& o = s.shard;
  o.shard = absl::GetFlag(FLAGS_shard);
  o.num_shards = plan->num_shards;
  o.num_fragments = plan->num_fragments;
  o.manifest = plan->manifest;
  o.model_spec = plan->model_spec;
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
  o.max_staleness = absl::GetFlag(FLAGS_max_staleness);
  o.push_steps_cap = absl::GetFlag(FLAGS_push_steps_cap);
  o.push_norm_cap = absl::GetFlag(FLAGS_push_norm_cap);
  o.worker_credit_bytes = absl::GetFlag(FLAGS_worker_credit_mib) << 20;
  o.keep_trains.time = absl::GetFlag(FLAGS_keep_cut_trains_for);
  o.keep_trains.bytes = absl::GetFlag(FLAGS_keep_cut_trains_mib) << 20;
  o.outer_choice = absl::GetFlag(FLAGS_outer_step);
  o.outer.lr = static_cast<float>(absl::GetFlag(FLAGS_outer_lr));
  o.outer.mu = static_cast<float>(absl::GetFlag(FLAGS_outer_momentum));
  o.sparse_outer = {static_cast<float>(absl::GetFlag(FLAGS_sparse_outer_lr)), 0.0f};
  o.worker_timeout = absl::GetFlag(FLAGS_worker_timeout);
  const std::string codec = absl::GetFlag(FLAGS_download_codec);
  auto download = kernels::ParseCodec(codec);
  if (!download.ok())
    return absl::InvalidArgumentError(
        absl::StrCat("--download_codec=", codec, ": ", download.status().message()));
  o.download = *download;
  o.download_chain = absl::GetFlag(FLAGS_download_chain);
  o.download_keyframe_every = absl::GetFlag(FLAGS_download_keyframe_every);
  auto faults = TestFaultsFromFlags();
  if (!faults.ok()) return faults.status();
  s.faults = *std::move(faults);
  o.faults = s.faults;
  if (auto st = Validate(o); !st.ok()) return st;

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
  return s;
}

}  // namespace diloco::server
