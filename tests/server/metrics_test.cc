// The operator views: Prometheus text reflects the shard's counters, and the HTTP endpoint
// serves the latest snapshot.
#include "server/metrics.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include "server/counter_table.h"
#include "tests/server/shard_harness.h"

namespace diloco::server::testing {
namespace {

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

// The number after `"key":` in `json` from position `from` on; -1 when absent.
double JsonValueAfter(const std::string& json, const std::string& key, size_t from = 0) {
  const std::string k = "\"" + key + "\":";
  const size_t at = json.find(k, from);
  return at == std::string::npos ? -1 : std::stod(json.substr(at + k.size()));
}

// The value of the sample line `name{labels} value`; -1 when absent.
double PrometheusValue(const std::string& text, const std::string& sample) {
  const size_t at = text.find("\n" + sample + " ");
  return at == std::string::npos ? -1 : std::stod(text.substr(at + sample.size() + 2));
}

// One table names each counter for both views: every row is in the Stats JSON and in the
// Prometheus text, with the same value, and its value is the counter's.
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
  const std::string json = h.shard().StatsJson();
  const std::string prom = PrometheusText(h.shard());
  const ShardCounters& c = h.shard().counters();
  for (const CounterRow& r : CounterRows()) {
    const double want = static_cast<double>(c.*r.field);
    EXPECT_EQ(JsonValueAfter(json, r.json), want) << r.json << " in " << json;
    EXPECT_EQ(PrometheusValue(prom, std::string(r.prometheus) + "{shard=\"0\"}"), want)
        << r.prometheus << " in " << prom;
  }
  const size_t pushes = json.find("\"pushes\":{");
  ASSERT_NE(pushes, std::string::npos) << json;
  for (const CounterRow& r : PushOutcomeRows()) {
    const double want = static_cast<double>(c.*r.field);
    EXPECT_EQ(JsonValueAfter(json, r.json, pushes), want) << r.json << " in " << json;
    EXPECT_EQ(PrometheusValue(
                  prom, std::string("diloco_pushes_total{shard=\"0\",outcome=\"") + r.json + "\"}"),
              want)
        << r.json << " in " << prom;
  }
  // The activity above moved the counters it should have (so the comparisons are not of zeros).
  EXPECT_EQ(c.rounds, 1u);
  EXPECT_EQ(c.pushes_duplicate, 1u);
  EXPECT_EQ(c.pushes_no_credit, 1u);
  EXPECT_GE(c.messages_bad, 2u);
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
