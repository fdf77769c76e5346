// AuditLog (--audit_jsonl): the promises among a shard's answers are written, with the version
// and a digest of the published values that a restart's "recovered" line repeats, and the
// Applied answers are counted (what --test_kill_after_applied counts).
#include "server/audit_log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "tests/server/shard_harness.h"

namespace diloco::server::testing {
namespace {

using wire::MsgType;

std::vector<std::string> Lines(const std::filesystem::path& p) {
  std::vector<std::string> lines;
  std::ifstream in(p);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

TEST(AuditLogTest, PromisesAreWrittenWithTheDigestARestartRepeats) {
  const auto path =
      std::filesystem::temp_directory_path() / absl::StrCat("diloco_audit_", ::getpid(), ".jsonl");
  std::filesystem::remove(path);
  ShardHarness h(TinyOptions());
  auto log = AuditLog::Open(path.string());
  ASSERT_TRUE(log.ok()) << log.status();
  log->Started(h.shard());  // nothing yet: version 0 of both fragments
  const uint64_t inc = h.shard().incarnation();

  h.Hello("a", 1);
  const uint64_t n0 = h.fragment(0).numel;
  auto init = h.Init("a", 1, 0, std::vector<float>(n0, 1.0f));
  EXPECT_EQ(log->Answers(h.shard(), init), 0u);  // theta(0) accepted: a promise, not Applied
  h.Push("a", 1, 0, /*seq=*/1, /*base=*/1, std::vector<float>(n0, 0.1f));
  h.clock().Advance(absl::Seconds(6));  // past the grace cap: the lone push's round closes
  auto out = h.Tick();
  ASSERT_NE(Only(out, MsgType::FragmentUpdate), nullptr);
  EXPECT_EQ(log->Answers(h.shard(), out), 1u);
  const auto sums = h.shard().published_checksums(0);
  ASSERT_NE(sums, nullptr);
  const uint64_t digest = AuditLog::Digest(*sums);
  EXPECT_LT(digest, uint64_t{1} << 48);
  log->Started(h.shard());  // as a restart on this state would write

  const auto lines = Lines(path);
  std::filesystem::remove(path);
  ASSERT_EQ(lines.size(), 6u);
  const std::string i = absl::StrCat("\"incarnation\":\"", inc, "\"");
  EXPECT_NE(lines[0].find("\"event\":\"recovered\""), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find(i), std::string::npos) << lines[0];
  EXPECT_NE(lines[0].find("\"version\":0"), std::string::npos) << lines[0];
  EXPECT_NE(lines[2].find("\"event\":\"initialized\""), std::string::npos) << lines[2];
  EXPECT_NE(lines[2].find("\"worker\":1"), std::string::npos) << lines[2];
  const std::string applied = lines[3];
  EXPECT_NE(applied.find("\"event\":\"applied\""), std::string::npos) << applied;
  const std::vector<std::string> fields = {"\"fragment\":0", "\"version\":2",
                                           "\"worker\":1",   "\"generation\":1",
                                           "\"seq\":1",      absl::StrCat("\"digest\":", digest)};
  for (const auto& f : fields)
    EXPECT_NE(applied.find(f), std::string::npos) << f << " in " << applied;
  EXPECT_NE(lines[4].find(absl::StrCat("\"digest\":", digest)), std::string::npos) << lines[4];
  EXPECT_NE(lines[4].find("\"version\":2"), std::string::npos) << lines[4];
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
