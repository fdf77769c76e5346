// The operator views: Prometheus text reflects the shard's counters, and the HTTP endpoint
// serves the latest snapshot.
#include "server/metrics.h"

#include <gtest/gtest.h>
#include <httplib.h>

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
