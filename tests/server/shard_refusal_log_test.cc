// Refusals are told to the operator: counted by reason in the counters, the Stats JSON, the
// progress line and Prometheus, and logged with the reason at most once per reason every
// Shard::kRefusalLogInterval, with the count of those left out in between.
#include <gtest/gtest.h>

#include "server/metrics.h"
#include "tests/server/shard_harness.h"

namespace diloco::server::testing {
namespace {

using wire::ErrorCode;
using wire::MsgType;

TEST(ShardRefusalLogTest, RefusalsAreCountedByReasonAndLoggedRateLimited) {
  ShardHarness h(TinyOptions());
  const uint64_t n = h.fragment(0).numel;
  auto push_unbound = [&] {  // a push on a connection that never said Hello
    auto out = h.Push("stranger", 7, 0, 1, 1, std::vector<float>(n, 0.1f));
    const Outgoing* e = Only(out, MsgType::Error);
    ASSERT_NE(e, nullptr);
    EXPECT_EQ(e->header.error_code, ErrorCode::BadIdentity);
    EXPECT_EQ(e->header.refused_type, MsgType::Push);  // the Error names what it refuses
  };
  push_unbound();
  auto lines = h.shard().TakeLogLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("worker 7"), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("BadIdentity"), std::string::npos) << lines[0];

  push_unbound();  // within the interval: counted, not logged
  EXPECT_TRUE(h.shard().TakeLogLines().empty());
  h.clock().Advance(Shard::kRefusalLogInterval);
  push_unbound();
  lines = h.shard().TakeLogLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("and 1 more"), std::string::npos) << lines[0];

  const auto& c = h.shard().counters();
  EXPECT_EQ(c.refused_by_reason[static_cast<size_t>(ErrorCode::BadIdentity)], 3u);
  EXPECT_EQ(c.messages_bad, 3u);
  EXPECT_NE(h.shard().StatsJson().find("\"refused_by_reason\":{\"BadIdentity\":3}"),
            std::string::npos)
      << h.shard().StatsJson();
  EXPECT_NE(ProgressLine(h.shard()).find("bad 3 (BadIdentity 3)"), std::string::npos)
      << ProgressLine(h.shard());
  EXPECT_NE(
      PrometheusText(h.shard()).find("diloco_refusals_total{shard=\"0\",reason=\"BadIdentity\"} 3"),
      std::string::npos);
}

TEST(ShardRefusalLogTest, AnUnboundRefusalFromTheServerLoopCountsAndNamesTheClaimedWorker) {
  ShardHarness h(TinyOptions());
  std::vector<Outgoing> out;
  h.shard().RefuseUnbound("r", absl::PermissionDeniedError("key not on the allow-list"),
                          {.worker = 4, .type = MsgType::Hello}, &out);
  const Outgoing* e = Only(out, MsgType::Error);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->header.worker_id, 4u);
  EXPECT_EQ(e->header.refused_type, MsgType::Hello);  // a refused identity, for the worker
  EXPECT_EQ(e->header.plan_fingerprint, h.shard().plan_fingerprint());
  EXPECT_EQ(h.shard().counters().messages_bad, 1u);
  const auto lines = h.shard().TakeLogLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("allow-list"), std::string::npos) << lines[0];
}

}  // namespace
}  // namespace diloco::server::testing
