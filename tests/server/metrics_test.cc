// The operator views: the Stats JSON, the Prometheus text and the progress line all show every
// row of the counter table with its value; the staleness histogram is a whole Prometheus
// histogram; the HTTP endpoint serves the latest snapshot.
#include "server/metrics.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "server/counter_table.h"
#include "tests/server/shard_harness.h"

namespace diloco::server::testing {
namespace {

using Json = nlohmann::json;

TEST(MetricsTest, PrometheusTextCountsRoundsPushesAndVersions) {
  ShardHarness h(TinyOptions());
  const uint64_t n = h.fragment(0).numel;
  h.Hello("a", 1);
  h.Init("a", 1, 0, std::vector<float>(n, 1.0f));
  h.Push("a", 1, 0, 1, 1, std::vector<float>(n, 0.1f));
  h.Push("a", 1, 0, 1, 1, std::vector<float>(n, 0.1f));  // duplicate while queued
  ASSERT_EQ(h.Tick().size(), 1u);
  const std::string t = PrometheusText(h.shard());
  EXPECT_NE(t.find("diloco_rounds_total{shard=\"0\"} 1\n"), std::string::npos) << t;
  EXPECT_NE(t.find("diloco_pushes_total{shard=\"0\",outcome=\"queued\"} 1\n"), std::string::npos);
  EXPECT_NE(t.find("diloco_pushes_total{shard=\"0\",outcome=\"duplicate\"} 1\n"),
            std::string::npos);
  EXPECT_NE(t.find("diloco_fragment_version{shard=\"0\",fragment=\"0\"} 2\n"), std::string::npos);
  EXPECT_NE(t.find("diloco_push_staleness_bucket{shard=\"0\",le=\"0\"} 1\n"), std::string::npos);
  EXPECT_NE(ProgressLine(h.shard()).find("rounds 1"), std::string::npos);
}

// The value of the sample line `name{labels} value`; -1 when absent.
double PrometheusValue(const std::string& text, const std::string& sample) {
  const size_t at = text.find("\n" + sample + " ");
  return at == std::string::npos ? -1 : std::stod(text.substr(at + sample.size() + 2));
}

// A row's text in the progress line with `value` in it.
std::string ProgressItem(const CounterRow& r, const std::string& value) {
  return absl::StrReplaceAll(r.progress, {{"{}", value}});
}

// Every row of the table in every view: with each counter at a value of its own, the Stats
// JSON members, the Prometheus text and the progress line each show every row with its value.
TEST(MetricsTest, EveryCounterRowIsInEveryViewWithItsValue) {
  ShardCounters c;
  std::vector<std::pair<const CounterRow*, std::string>> shown;  // row, its progress value
  uint64_t next = 1;
  for (auto rows : {CounterRows(), PushOutcomeRows()}) {
    for (const CounterRow& r : rows) {
      const uint64_t k = next++;
      // Bytes in whole KiB below a MiB: the progress line shows them as "3.0KiB".
      c.*r.field = r.unit == CounterRow::kBytes ? k * 1024 : k;
      shown.emplace_back(
          &r, r.unit == CounterRow::kBytes ? absl::StrFormat("%.1fKiB", k) : absl::StrCat(k));
    }
  }
  c.refused_by_reason[static_cast<size_t>(wire::ErrorCode::NoCredit)] = 2;
  c.checkpoint_error = "disk full";
  const ShardFacts facts{.shard = 3, .versions = {{0, 5}, {2, 6}}, .live_workers = 4};

  const auto json = CounterJson(c);
  const std::string prom = PrometheusText(c, facts);
  const std::string progress = ProgressText(c, facts);
  for (const CounterRow& r : CounterRows()) {
    EXPECT_EQ(json.value(r.json, Json()), c.*r.field) << r.json << " in " << json;
    EXPECT_EQ(PrometheusValue(prom, std::string(r.prometheus) + "{shard=\"3\"}"),
              static_cast<double>(c.*r.field))
        << r.prometheus << " in " << prom;
  }
  for (const CounterRow& r : PushOutcomeRows()) {
    EXPECT_EQ(json.at("pushes").value(r.json, Json()), c.*r.field) << r.json << " in " << json;
    EXPECT_EQ(PrometheusValue(
                  prom, absl::StrCat("diloco_pushes_total{shard=\"3\",outcome=\"", r.json, "\"}")),
              static_cast<double>(c.*r.field))
        << r.json << " in " << prom;
  }
  for (const auto& [r, value] : shown)
    EXPECT_NE(progress.find(ProgressItem(*r, value)), std::string::npos)
        << ProgressItem(*r, value) << " in " << progress;
  EXPECT_NE(progress.find(absl::StrCat("bad ", c.messages_bad, " (NoCredit 2) ")),
            std::string::npos)
      << progress;
  EXPECT_NE(progress.find(" failed) FAILING: disk full"), std::string::npos) << progress;
  EXPECT_EQ(progress.rfind("shard 3 | live workers 4 | versions 0:5 2:6 | ", 0), 0u) << progress;
  EXPECT_EQ(PrometheusValue(prom, "diloco_live_workers{shard=\"3\"}"), 4);
  EXPECT_EQ(PrometheusValue(prom, "diloco_fragment_version{shard=\"3\",fragment=\"2\"}"), 6);

  // At zero the rare rows leave the progress line; the others stay, showing 0.
  const std::string quiet = ProgressText(ShardCounters{}, facts);
  for (const auto& [r, value] : shown) {
    const bool present =
        quiet.find(ProgressItem(*r, r->unit == CounterRow::kBytes ? "0.0KiB" : "0")) !=
        std::string::npos;
    EXPECT_EQ(present, r->show == CounterRow::kAlways) << r->progress << " in " << quiet;
  }
  EXPECT_EQ(quiet.find("FAILING"), std::string::npos) << quiet;
}

// A Prometheus histogram has its buckets, _sum and _count: the staleness histogram's _count is
// its +Inf bucket and its _sum the counted staleness.
TEST(MetricsTest, StalenessHistogramHasBucketsSumAndCount) {
  ShardCounters c;
  c.staleness_hist[0] = 3;
  c.staleness_hist[2] = 1;
  c.staleness_hist[7] = 2;
  c.staleness_sum = 2 + 2 * 40;
  const std::string prom = PrometheusText(c, ShardFacts{});
  EXPECT_NE(prom.find("# TYPE diloco_push_staleness histogram\n"), std::string::npos) << prom;
  EXPECT_EQ(PrometheusValue(prom, "diloco_push_staleness_bucket{shard=\"0\",le=\"0\"}"), 3);
  EXPECT_EQ(PrometheusValue(prom, "diloco_push_staleness_bucket{shard=\"0\",le=\"2\"}"), 4);
  EXPECT_EQ(PrometheusValue(prom, "diloco_push_staleness_bucket{shard=\"0\",le=\"+Inf\"}"), 6);
  EXPECT_EQ(PrometheusValue(prom, "diloco_push_staleness_sum{shard=\"0\"}"), 82);
  EXPECT_EQ(PrometheusValue(prom, "diloco_push_staleness_count{shard=\"0\"}"), 6);
}

// The same through a live shard: its Stats JSON (Shard::StatsJson splices the table's members),
// Prometheus text and progress line agree with its counters after real traffic.
TEST(MetricsTest, EveryCounterIsInTheStatsJsonAndPrometheusWithOneValue) {
  auto o = TinyOptions();
  o.worker_credit_bytes = 1;  // the second fragment's push is refused NoCredit
  ShardHarness h(o);
  const uint64_t n = h.fragment(0).numel;
  h.Hello("a", 1);
  h.Init("a", 1, 0, std::vector<float>(n, 1.0f));
  h.Init("a", 1, 1, std::vector<float>(h.fragment(1).numel, 1.0f));
  h.Push("a", 1, 0, 1, 1, std::vector<float>(n, 0.1f));
  h.Push("a", 1, 0, 1, 1, std::vector<float>(n, 0.1f));                    // duplicate while queued
  h.Push("a", 1, 1, 1, 1, std::vector<float>(h.fragment(1).numel, 0.1f));  // no credit
  h.Push("b", 2, 0, 2, 1, std::vector<float>(n, 0.1f));                    // no Hello: refused
  h.Tick();
  const Json json = Json::parse(h.shard().StatsJson());
  const std::string prom = PrometheusText(h.shard());
  const std::string progress = ProgressLine(h.shard());
  const ShardCounters& c = h.shard().counters();
  for (const CounterRow& r : CounterRows()) {
    EXPECT_EQ(json.value(r.json, Json()), c.*r.field) << r.json << " in " << json;
    EXPECT_EQ(PrometheusValue(prom, std::string(r.prometheus) + "{shard=\"0\"}"),
              static_cast<double>(c.*r.field))
        << r.prometheus << " in " << prom;
  }
  for (const CounterRow& r : PushOutcomeRows()) {
    EXPECT_EQ(json.at("pushes").value(r.json, Json()), c.*r.field) << r.json << " in " << json;
    EXPECT_EQ(PrometheusValue(
                  prom, std::string("diloco_pushes_total{shard=\"0\",outcome=\"") + r.json + "\"}"),
              static_cast<double>(c.*r.field))
        << r.json << " in " << prom;
  }
  // The activity above moved the counters it should have (so the comparisons are not of zeros).
  EXPECT_EQ(c.rounds, 1u);
  EXPECT_EQ(c.pushes_duplicate, 1u);
  EXPECT_EQ(c.pushes_no_credit, 1u);
  EXPECT_GE(c.messages_bad, 2u);
  EXPECT_NE(progress.find("no credit 1"), std::string::npos) << progress;
  EXPECT_NE(progress.find(absl::StrCat("bad ", c.messages_bad, " (")), std::string::npos)
      << progress;
  EXPECT_EQ(PrometheusValue(prom, "diloco_push_staleness_sum{shard=\"0\"}"), 0);
}

TEST(MetricsTest, HttpEndpointServesTheLatestSnapshot) {
  auto server = MetricsHttpServer::Start("127.0.0.1:0");
  ASSERT_TRUE(server.ok()) << server.status();
  ASSERT_GT((*server)->port(), 0);
  (*server)->Publish("diloco_rounds_total{shard=\"0\"} 42\n");
  httplib::Client cli("127.0.0.1", (*server)->port());
  auto res = cli.Get("/metrics");
  ASSERT_TRUE(res);
  EXPECT_EQ(res->status, 200);
  EXPECT_EQ(res->body, "diloco_rounds_total{shard=\"0\"} 42\n");
  EXPECT_FALSE(MetricsHttpServer::Start("no-port").ok());
}

}  // namespace
}  // namespace diloco::server::testing
