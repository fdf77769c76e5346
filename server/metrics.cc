#include "server/metrics.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "server/counter_table.h"

namespace diloco::server {
namespace {

std::string Bytes(uint64_t b) {
  if (b >= (uint64_t{1} << 30)) return absl::StrFormat("%.2fGiB", b / double(uint64_t{1} << 30));
  if (b >= (uint64_t{1} << 20)) return absl::StrFormat("%.1fMiB", b / double(uint64_t{1} << 20));
  return absl::StrFormat("%.1fKiB", b / 1024.0);
}

std::string Value(const CounterRow& r, uint64_t v) {
  return r.unit == CounterRow::kBytes ? Bytes(v) : absl::StrCat(v);
}

// A sample value as Prometheus writes it (NaN, +Inf, -Inf spelled its way).
std::string Sample(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  return absl::StrCat(v);
}

std::string LabelValue(absl::string_view v) {
  return absl::StrReplaceAll(v, {{"\\", "\\\\"}, {"\"", "\\\""}, {"\n", "\\n"}});
}

template <typename T>
std::optional<double> Opt(const std::optional<T>& v) {
  return v ? std::optional<double>(static_cast<double>(*v)) : std::nullopt;
}

// Each learner's figures as gauges labelled by worker (one series per live worker; a figure it
// did not send has no sample), and its strings as labels of diloco_learner_info.
void AppendLearners(const std::vector<LearnerRow>& rows, const std::string& l, std::string* t) {
  struct Gauge {
    const char* name;
    const char* help;
    std::optional<double> (*value)(const LearnerRow&);
  };
  static const Gauge kGauges[] = {
      {"diloco_learner_step", "Inner steps the learner took, as it last said.",
       [](const LearnerRow& r) { return Opt(r.figures.step); }},
      {"diloco_learner_loss", "The learner's moving-average training loss, as it last said.",
       [](const LearnerRow& r) { return Opt(r.figures.loss); }},
      {"diloco_learner_tokens_per_second", "The learner's training tokens per second.",
       [](const LearnerRow& r) { return Opt(r.figures.tokens_per_s); }},
      {"diloco_learner_utilization", "Share of the learner's wall time inside training steps.",
       [](const LearnerRow& r) { return Opt(r.figures.utilization); }},
      {"diloco_learner_inner_steps", "The learner's H (inner steps per push) now.",
       [](const LearnerRow& r) { return Opt(r.figures.inner_steps); }},
      {"diloco_learner_sent_bytes", "Bytes the learner's sync client sent to every shard.",
       [](const LearnerRow& r) { return Opt(r.figures.bytes_sent); }},
      {"diloco_learner_received_bytes", "Bytes the learner's sync client received.",
       [](const LearnerRow& r) { return Opt(r.figures.bytes_received); }},
      {"diloco_learner_mean_staleness", "Moving average of the learner's pushes' staleness.",
       [](const LearnerRow& r) { return Opt(r.figures.mean_staleness); }},
      {"diloco_learner_step_time_seconds", "The learner's moving-average inner step time.",
       [](const LearnerRow& r) { return std::optional<double>(r.step_time_us / 1e6); }},
      {"diloco_learner_seen_age_seconds", "Seconds since this shard last heard the learner.",
       [](const LearnerRow& r) { return std::optional<double>(r.seen_age_s); }},
      {"diloco_learner_push_age_seconds", "Seconds since the learner's last push to this shard.",
       [](const LearnerRow& r) { return r.push_age_s; }},
      {"diloco_learner_applied_age_seconds",
       "Seconds since a round of this shard last applied one of the learner's pushes.",
       [](const LearnerRow& r) { return r.applied_age_s; }},
  };
  for (const Gauge& g : kGauges) {
    absl::StrAppend(t, "# HELP ", g.name, " ", g.help, "\n# TYPE ", g.name, " gauge\n");
    for (const LearnerRow& r : rows)
      if (const auto v = g.value(r))
        absl::StrAppend(t, g.name, "{", l, ",worker=\"", r.id, "\"} ", Sample(*v), "\n");
  }
  absl::StrAppend(t,
                  "# HELP diloco_learner_info 1 per live learner; its generation, host, device "
                  "and codec as labels.\n# TYPE diloco_learner_info gauge\n");
  for (const LearnerRow& r : rows)
    absl::StrAppend(t, "diloco_learner_info{", l, ",worker=\"", r.id, "\",generation=\"",
                    r.generation, "\",host=\"", LabelValue(r.figures.host), "\",device=\"",
                    LabelValue(r.figures.device), "\",codec=\"", LabelValue(r.figures.codec),
                    "\"} 1\n");
}

}  // namespace

ShardFacts FactsOf(const Shard& shard) {
  ShardFacts f;
  f.shard = shard.shard_index();
  for (uint32_t id : shard.owned()) f.versions.emplace_back(id, shard.published_version(id));
  f.live_workers = shard.live_workers();
  f.learners = shard.learners();
  return f;
}

std::string ProgressText(const ShardCounters& c, const ShardFacts& facts) {
  std::string t =
      absl::StrCat("shard ", facts.shard, " | live workers ", facts.live_workers, " | versions");
  for (const auto& [id, version] : facts.versions) absl::StrAppend(&t, " ", id, ":", version);
  std::vector<const CounterRow*> rows;
  for (const CounterRow& r : PushOutcomeRows()) rows.push_back(&r);
  for (const CounterRow& r : CounterRows()) rows.push_back(&r);
  std::stable_sort(rows.begin(), rows.end(),
                   [](const CounterRow* a, const CounterRow* b) { return a->group < b->group; });
  int group = -1;
  for (const CounterRow* r : rows) {
    const uint64_t v = c.*r->field;
    if (r->show == CounterRow::kNonzero && v == 0) continue;
    absl::StrAppend(&t, r->group != group ? " | " : " ",
                    absl::StrReplaceAll(r->progress, {{"{}", Value(*r, v)}}));
    group = r->group;
    if (r->detail == CounterRow::kRefusalReasons && v != 0)
      absl::StrAppend(&t, " (", RefusalsText(c, "", " ", ", "), ")");
    if (r->detail == CounterRow::kCheckpointError && !c.checkpoint_error.empty())
      absl::StrAppend(&t, " FAILING: ", c.checkpoint_error);
  }
  return t;
}

std::string ProgressLine(const Shard& shard) {
  return ProgressText(shard.counters(), FactsOf(shard));
}

std::string PrometheusText(const Shard& shard) {
  return PrometheusText(shard.counters(), FactsOf(shard));
}

std::string PrometheusText(const ShardCounters& c, const ShardFacts& facts) {
  const std::string l = absl::StrCat("shard=\"", facts.shard, "\"");
  std::string t;
  auto counter = [&](const char* name, const char* help, uint64_t v, const std::string& labels) {
    absl::StrAppend(&t, "# HELP ", name, " ", help, "\n# TYPE ", name, " counter\n", name, "{",
                    labels, "} ", v, "\n");
  };
  auto gauge = [&](const char* name, const char* help, double v) {
    absl::StrAppend(&t, "# HELP ", name, " ", help, "\n# TYPE ", name, " gauge\n", name, "{", l,
                    "} ", v, "\n");
  };
  for (const CounterRow& r : CounterRows()) counter(r.prometheus, r.help, c.*r.field, l);
  absl::StrAppend(&t, "# HELP diloco_pushes_total ", PushOutcomeRows()[0].help, "\n",
                  "# TYPE diloco_pushes_total counter\n");
  for (const CounterRow& r : PushOutcomeRows())
    absl::StrAppend(&t, "diloco_pushes_total{", l, ",outcome=\"", r.json, "\"} ", c.*r.field, "\n");
  absl::StrAppend(&t, "# HELP diloco_refusals_total Error replies by reason (wire ErrorCode).\n",
                  "# TYPE diloco_refusals_total counter\n");
  for (size_t i = 1; i < kErrorCodes; ++i)
    absl::StrAppend(&t, "diloco_refusals_total{", l, ",reason=\"",
                    wire::EnumNameErrorCode(static_cast<wire::ErrorCode>(i)), "\"} ",
                    c.refused_by_reason[i], "\n");
  // 1 while the newest checkpoint write failed, labelled with its cause's absl code (a full
  // disk is RESOURCE_EXHAUSTED); the cause's text is in the log and the Stats JSON.
  absl::StrAppend(&t, "# HELP diloco_checkpoint_failing 1 while checkpoint writes fail.\n",
                  "# TYPE diloco_checkpoint_failing gauge\n", "diloco_checkpoint_failing{", l,
                  ",code=\"", c.checkpoint_error.empty() ? "OK" : c.checkpoint_error_code, "\"} ",
                  c.checkpoint_error.empty() ? 0 : 1, "\n");
  gauge("diloco_checkpoint_seconds", "Duration of the last checkpoint write.",
        c.last_checkpoint_ms / 1e3);
  gauge("diloco_checkpoint_bytes", "Tensor bytes of the last checkpoint.",
        static_cast<double>(c.last_checkpoint_bytes));
  gauge("diloco_apply_seconds", "Decode-and-accumulate time of the last push.",
        c.last_apply_ms / 1e3);
  gauge("diloco_live_workers", "Workers heard from within the liveness timeout.",
        facts.live_workers);
  // Staleness histogram: buckets 0,1,2,3,<8,<16,<32,+Inf (cumulative, Prometheus style).
  absl::StrAppend(&t, "# HELP diloco_push_staleness Rounds between a push's base and now.\n",
                  "# TYPE diloco_push_staleness histogram\n");
  const char* les[] = {"0", "1", "2", "3", "7", "15", "31", "+Inf"};
  uint64_t cum = 0;
  for (int i = 0; i < 8; ++i) {
    cum += c.staleness_hist[i];
    absl::StrAppend(&t, "diloco_push_staleness_bucket{", l, ",le=\"", les[i], "\"} ", cum, "\n");
  }
  absl::StrAppend(&t, "diloco_push_staleness_sum{", l, "} ", c.staleness_sum, "\n");
  absl::StrAppend(&t, "diloco_push_staleness_count{", l, "} ", cum, "\n");
  absl::StrAppend(&t, "# HELP diloco_fragment_version Published version per fragment.\n",
                  "# TYPE diloco_fragment_version gauge\n");
  for (const auto& [id, version] : facts.versions)
    absl::StrAppend(&t, "diloco_fragment_version{", l, ",fragment=\"", id, "\"} ", version, "\n");
  AppendLearners(facts.learners, l, &t);
  return t;
}

}  // namespace diloco::server
