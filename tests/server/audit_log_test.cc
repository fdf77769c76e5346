// AuditLog (--audit_jsonl): the promises among a shard's answers are written, with the version
// and a digest of the published values that a restart's "recovered" line repeats (an Applied
// line also with the steps and tokens its push claimed), and the Applied answers are counted
// (what --test_kill_after_applied counts).
#include "server/audit_log.h"

#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "tests/server/shard_harness.h"
#include "tests/util/jsonl.h"
#include "tests/util/temp_dir.h"

namespace diloco::server::testing {
namespace {

using wire::MsgType;

TEST(AuditLogTest, PromisesAreWrittenWithTheDigestARestartRepeats) {
  const diloco::testing::TempDir dir("diloco_audit_");
  const std::string path = dir.Sub("audit.jsonl");
  ShardHarness h(TinyOptions());
  auto log = AuditLog::Open(path);
  ASSERT_TRUE(log.ok()) << log.status();
  log->Started(h.shard());  // nothing yet: version 0 of both fragments
  const uint64_t inc = h.shard().incarnation();

  h.Hello("a", 1);
  const uint64_t n0 = h.fragment(0).numel;
  auto init = h.Init("a", 1, 0, std::vector<float>(n0, 1.0f));
  EXPECT_EQ(log->Answers(h.shard(), init), 0u);  // theta(0) accepted: a promise, not Applied
  h.Push("a", 1, 0, /*seq=*/1, /*base=*/1, std::vector<float>(n0, 0.1f), /*tokens=*/1234,
         /*steps=*/25);
  h.clock().Advance(absl::Seconds(6));  // past the grace cap: the lone push's round closes
  auto out = h.Tick();
  ASSERT_NE(Only(out, MsgType::FragmentUpdate), nullptr);
  EXPECT_EQ(log->Answers(h.shard(), out), 1u);
  const auto sums = h.shard().published_checksums(0);
  ASSERT_NE(sums, nullptr);
  const uint64_t digest = AuditLog::Digest(*sums);
  EXPECT_LT(digest, uint64_t{1} << 48);
  log->Started(h.shard());  // as a restart on this state would write

  const auto lines = diloco::testing::ReadJsonLines(path);
  ASSERT_EQ(lines.size(), 6u);
  const std::string i = absl::StrCat(inc);  // a string: 64 bits do not survive a JSON number
  EXPECT_EQ(lines[0].at("event"), "recovered") << lines[0];
  EXPECT_EQ(lines[0].at("incarnation"), i) << lines[0];
  EXPECT_EQ(lines[0].at("version"), 0) << lines[0];
  EXPECT_EQ(lines[2].at("event"), "initialized") << lines[2];
  EXPECT_EQ(lines[2].at("worker"), 1) << lines[2];
  const auto& applied = lines[3];
  EXPECT_EQ(applied.at("event"), "applied") << applied;
  EXPECT_EQ(applied.at("incarnation"), i) << applied;
  EXPECT_EQ(applied.at("fragment"), 0) << applied;
  EXPECT_EQ(applied.at("version"), 2) << applied;
  EXPECT_EQ(applied.at("worker"), 1) << applied;
  EXPECT_EQ(applied.at("generation"), 1) << applied;
  EXPECT_EQ(applied.at("seq"), 1) << applied;
  EXPECT_EQ(applied.at("steps"), 25) << applied;  // what the push claimed
  EXPECT_EQ(applied.at("tokens"), 1234) << applied;
  EXPECT_EQ(applied.at("digest"), digest) << applied;
  EXPECT_EQ(lines[4].at("digest"), digest) << lines[4];
  EXPECT_EQ(lines[4].at("version"), 2) << lines[4];
}

TEST(AuditLogTest, WithoutAPathNothingIsWrittenButAppliedAnswersAreCounted) {
  ShardHarness h(TinyOptions());
  auto log = AuditLog::Open("");
  ASSERT_TRUE(log.ok());
  h.Hello("a", 1);
  const uint64_t n0 = h.fragment(0).numel;
  h.Init("a", 1, 0, std::vector<float>(n0, 1.0f));
  h.Push("a", 1, 0, 1, 1, std::vector<float>(n0, 0.1f));
  h.clock().Advance(absl::Seconds(6));
  EXPECT_EQ(log->Answers(h.shard(), h.Tick()), 1u);
}

TEST(AuditLogTest, AnUnwritablePathIsRefusedByName) {
  auto log = AuditLog::Open("/nonexistent-dir/audit.jsonl");
  ASSERT_FALSE(log.ok());
  EXPECT_NE(log.status().message().find("/nonexistent-dir/audit.jsonl"), std::string::npos)
      << log.status();
}

}  // namespace
}  // namespace diloco::server::testing
