// The chaos suite's invariant checks, each shown to pass a sound trail and to catch a planted
// violation (a check that cannot fail proves nothing about the runs it passes).
#include "tests/chaos/invariants.h"

#include <gtest/gtest.h>

#include <fstream>
#include <optional>

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

PushClaim Claim(uint64_t worker, uint64_t seq, std::optional<uint64_t> steps,
                std::optional<uint64_t> tokens = std::nullopt) {
  return {"shard 1", worker, /*fragment=*/2, seq, steps, tokens};
}

TEST(ChaosInvariantsTest, APushClaimingMoreThanCarryMaxTimesHStepsIsCaught) {
  ClaimSummary s;
  // Bound 100 (carry_max 4 x H 25): 25 and 100 pass, the one that piled up 2,900 steps does not.
  const std::vector<PushClaim> claims = {Claim(0, 1, 25, 5000), Claim(1, 1, 100, 20000),
                                         Claim(3, 7, 2900, 580000), Claim(4, 1, std::nullopt)};
  const auto v = CheckPushClaims("applied pushes", claims, 100, &s);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].invariant, 8);
  EXPECT_NE(v[0].what.find("worker 3 fragment 2 seq 7 claims 2900 steps (580000 tokens)"),
            std::string::npos)
      << v[0].what;
  EXPECT_EQ(s.pushes, 4u);
  EXPECT_EQ(s.with_steps, 3u);  // the one that did not say is not checked
  EXPECT_EQ(s.max_steps, 2900u);
  EXPECT_EQ(s.max_tokens, 580000u);
  EXPECT_TRUE(CheckPushClaims("applied pushes", {claims[0], claims[1], claims[3]}, 100).empty());
}

TEST(ChaosInvariantsTest, PushClaimsOfWhichNoneSaidItsStepsFail) {
  const auto v = CheckPushClaims("applied pushes", {Claim(0, 1, std::nullopt, 5000)}, 100);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].invariant, 8);
  EXPECT_NE(v[0].what.find("nothing was checked"), std::string::npos) << v[0].what;
  EXPECT_EQ(CheckPushClaims("applied pushes", {}, 100).size(), 1u);  // no push at all
}

TEST(ChaosInvariantsTest, ClaimsAreReadFromAuditTrailsAndSyncEventsWhenPresent) {
  const TempDir dir("diloco_chaos_claims_");
  const std::string audit = dir.Sub("audit.jsonl"), events = dir.Sub("worker.jsonl");
  {
    std::ofstream out(audit);
    out << R"({"event":"recovered","incarnation":"1","fragment":2,"version":0,"digest":0})"
        << "\n"
        << R"({"event":"applied","incarnation":"1","fragment":2,"version":2,"digest":5,"worker":3,)"
        << R"("generation":9,"seq":4,"steps":2900,"tokens":580000})"
        << "\n"
        << R"({"event":"applied","incarnation":"1","fragment":2,"version":3,"digest":6,"worker":1,)"
        << R"("generation":9,"seq":1})"
        << "\n";  // written before claims were audited
  }
  {
    std::ofstream out(events);
    out << R"({"event":"push","worker":3,"shard":1,"fragment":2,"seq":4,"base_version":1,)"
        << R"("version":0,"steps":100,"tokens":20000})"
        << "\n"
        << R"({"event":"applied","worker":3,"shard":1,"fragment":2,"seq":4,"base_version":1,)"
        << R"("version":2})"
        << "\n"
        << R"({"event":"push","worker":3,"shard":1,"fragment":2,"seq":5,"base_version":2,)"
        << R"("version":0})"
        << "\n"
        << R"({"event":"reanchor","worker":3,"shard":1,"fragment":2,"seq":5,"steps":140})"
        << "\n"
        << R"({"event":"push","worker":3,"shard":1,"fragm)";
  }
  const auto applied = AppliedClaims("shard 1", ReadAudit(audit));
  ASSERT_EQ(applied.size(), 2u);
  EXPECT_EQ(applied[0].worker, 3u);
  EXPECT_EQ(applied[0].seq, 4u);
  EXPECT_EQ(applied[0].steps, 2900u);
  EXPECT_EQ(applied[0].tokens, 580000u);
  EXPECT_FALSE(applied[1].steps.has_value());
  EXPECT_FALSE(applied[1].tokens.has_value());
  EXPECT_EQ(Count(CheckPushClaims("applied", applied, 100), 8), 1);

  const auto sent = ReadPushClaims(events, "worker 3 run 0");
  ASSERT_EQ(sent.size(), 2u);  // pushes only; the line cut by a kill left out
  EXPECT_EQ(sent[0].steps, 100u);
  EXPECT_EQ(sent[0].tokens, 20000u);
  EXPECT_FALSE(sent[1].steps.has_value());
  EXPECT_TRUE(CheckPushClaims("sent", sent, 100).empty());
}

TEST(ChaosInvariantsTest, ProgressNeedsHalfTheGapAndNoFallBelowTheBestMidwayEvaluation) {
  // theta(0) 5.56, floor 1.08: half the gap is 3.32.
  ProgressFigures f{.initial = 5.56, .floor = 1.08, .midway = {1.80, 1.70}, .final = 1.75};
  EXPECT_TRUE(CheckProgress(f).empty());
  f.final = 1.70 + kMaxLossRegression - 0.01;  // within the margin of the best midway
  EXPECT_TRUE(CheckProgress(f).empty());
  f.final = 1.70 + kMaxLossRegression + 0.01;  // the end regressed, still far below half the gap
  auto v = CheckProgress(f);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_EQ(v[0].invariant, 7);
  EXPECT_NE(v[0].what.find("best midway evaluation (1.7000)"), std::string::npos) << v[0].what;
  f.final = 8.04;  // the wrecked end: both rules fail
  EXPECT_EQ(Count(CheckProgress(f), 7), 2);
  // A failed midway evaluation is left out; all of them failed is a violation.
  f = {.initial = 5.56, .floor = 1.08, .midway = {std::nullopt, 1.70}, .final = 1.75};
  EXPECT_TRUE(CheckProgress(f).empty());
  f.midway = {std::nullopt, std::nullopt};
  v = CheckProgress(f);
  ASSERT_EQ(v.size(), 1u);
  EXPECT_NE(v[0].what.find("none of the 2 midway"), std::string::npos) << v[0].what;
  // Without midway evaluations only the gap counts.
  f.midway.clear();
  EXPECT_TRUE(CheckProgress(f).empty());
  f.final = 3.5;
  EXPECT_EQ(Count(CheckProgress(f), 7), 1);
}

}  // namespace
}  // namespace diloco::testing
