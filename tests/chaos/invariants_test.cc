// The chaos suite's invariant checks, each shown to pass a sound trail and to catch a planted
// violation (a check that cannot fail proves nothing about the runs it passes).
#include "tests/chaos/invariants.h"

#include <gtest/gtest.h>

#include <fstream>

#include "tests/util/temp_dir.h"

namespace diloco::testing {
namespace {

AuditLine Recovered(uint64_t inc, uint64_t f, uint64_t v, uint64_t d) {
  return {AuditLine::kRecovered, inc, f, v, d, 0, 0, 0};
}
AuditLine Applied(uint64_t inc, uint64_t f, uint64_t v, uint64_t d, uint64_t w, uint64_t seq) {
  return {AuditLine::kApplied, inc, f, v, d, w, /*generation=*/5, seq};
}

// A shard started fresh, published versions 2 and 3 of fragment 0, restarted.
std::vector<AuditLine> Trail(uint64_t recovered_version, uint64_t recovered_digest) {
  return {Recovered(1, 0, 0, 0),      {AuditLine::kInitialized, 1, 0, 0, 0, 7, 0, 0},
          Applied(1, 0, 2, 22, 7, 1), Applied(1, 0, 2, 22, 8, 1),
          Applied(1, 0, 3, 33, 7, 2), Recovered(2, 0, recovered_version, recovered_digest)};
}

int Count(const std::vector<Violation>& v, int invariant) {
  int n = 0;
  for (const auto& x : v) n += x.invariant == invariant;
  return n;
}

TEST(ChaosInvariantsTest, ASoundPerRoundTrailPasses) {
  AuditSummary s;
  auto t = Trail(3, 33);
  t.push_back(Applied(2, 0, 4, 44, 7, 3));  // the next push after the restart
  EXPECT_TRUE(CheckShardAudit(t, /*per_round=*/true, &s).empty());
  EXPECT_EQ(s.incarnations, 2u);
  EXPECT_EQ(s.applied, 4u);
  EXPECT_EQ(s.max_version, 4u);
  // One round beyond the last published one was durable but unanswered: also sound.
  EXPECT_TRUE(CheckShardAudit(Trail(4, 44), true).empty());
}

TEST(ChaosInvariantsTest, APushAppliedAgainAfterARestartIsCaught) {
  auto t = Trail(3, 33);
  t.push_back(Applied(2, 0, 4, 44, 7, 2));  // seq 2 was already in version 3
  const auto v = CheckShardAudit(t, true);
  ASSERT_EQ(Count(v, 2), 1);
  EXPECT_NE(v[0].what.find("seq 2"), std::string::npos) << v[0].what;
}

TEST(ChaosInvariantsTest, PeriodicRollbackLetsUndonePushesApplyAgain) {
  AuditSummary s;
  auto t = Trail(2, 22);                    // back to the checkpoint at version 2
  t.push_back(Applied(2, 0, 3, 35, 7, 2));  // seq 2 again, version 3 with other values
  EXPECT_TRUE(CheckShardAudit(t, /*per_round=*/false, &s).empty());
  EXPECT_EQ(s.rolled_back, 1u);
  // Without the rollback the same trail is a double application.
  auto u = Trail(3, 33);
  u.push_back(Applied(2, 0, 4, 44, 7, 2));
  EXPECT_EQ(Count(CheckShardAudit(u, false), 2), 1);
}

TEST(ChaosInvariantsTest, LostOrAlteredRecoveryIsCaught) {
  EXPECT_EQ(Count(CheckShardAudit(Trail(2, 22), /*per_round=*/true), 3), 1);  // version 3 lost
  EXPECT_EQ(Count(CheckShardAudit(Trail(3, 99), true), 3), 1);   // other values at version 3
  EXPECT_EQ(Count(CheckShardAudit(Trail(2, 99), false), 3), 1);  // not the checkpoint's values
  EXPECT_EQ(Count(CheckShardAudit(Trail(4, 44), false), 3), 1);  // beyond anything published
  // Two different values published under one version in one timeline.
  auto t = Trail(3, 33);
  t.push_back(Applied(2, 0, 3, 34, 8, 2));
  EXPECT_EQ(Count(CheckShardAudit(t, true), 3), 1);
}

TEST(ChaosInvariantsTest, ThetaZeroAcceptedTwiceIsCaught) {
  auto t = Trail(3, 33);
  EXPECT_EQ(Count(CheckShardAudit(t, true), 6), 0);
  t.push_back({AuditLine::kInitialized, 2, 0, 0, 0, 8, 0, 0});
  EXPECT_EQ(Count(CheckShardAudit(t, true), 6), 1);
}

TEST(ChaosInvariantsTest, AWorkerSeeingAnOlderVersionIsCaughtOnPerRoundShardsOnly) {
  const std::vector<WorkerApplied> seen = {{0, 1, 5}, {1, 2, 9}, {0, 1, 6}, {1, 2, 7}, {0, 1, 4}};
  const auto v = CheckWorkerVersions("worker 3", seen, {true, false});
  ASSERT_EQ(v.size(), 1u);  // shard 1 is periodic: its 9 -> 7 is a rollback, not a violation
  EXPECT_EQ(v[0].invariant, 6);
  EXPECT_NE(v[0].what.find("version 4 after version 6"), std::string::npos) << v[0].what;
  EXPECT_EQ(CheckWorkerVersions("w", seen, {true, true}).size(), 2u);
}

TEST(ChaosInvariantsTest, ReadAuditSkipsALineCutByAKill) {
  const TempDir dir("diloco_chaos_audit_");
  const std::string path = dir.Sub("audit.jsonl");
  {
    std::ofstream out(path);
    out << R"({"event":"recovered","incarnation":"18446744073709551557","fragment":1,"version":0,"digest":0})"
        << "\n"
        << R"({"event":"applied","incarnation":"18446744073709551557","fragment":1,"version":2,"digest":281474976)"
        << R"(710655,"worker":3,"generation":1700000000123,"seq":4})"
        << "\n"
        << R"({"event":"applied","incarnation":"1","fragm)";
  }
  const auto lines = ReadAudit(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0].kind, AuditLine::kRecovered);
  EXPECT_EQ(lines[1].kind, AuditLine::kApplied);
  EXPECT_EQ(lines[1].digest, 281474976710655u);  // 2^48 - 1: exact through a double
  EXPECT_EQ(lines[1].generation, 1700000000123u);
  EXPECT_EQ(lines[1].seq, 4u);
  EXPECT_EQ(lines[1].incarnation, 18446744073709551557u);  // 64 bits, exact as a string
  EXPECT_EQ(lines[1].worker, 3u);
}

}  // namespace
}  // namespace diloco::testing
