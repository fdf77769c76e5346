// A shard whose disk fills up (per-round durability): the round's new version is held back
// rather than published undurable, the shard keeps answering from memory and counts the
// failure, and once space is back the retry publishes and a restart finds that version.
// The first test needs a tmpfs it can mount (root) and is skipped elsewhere; the second fails
// writes through the writer's test hook and runs everywhere.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "server/metrics.h"
#include "tests/server/shard_harness.h"
#include "tests/util/temp_dir.h"
#include "tests/util/tmpfs.h"

namespace diloco::server::testing {
namespace {

using wire::AckStatus;
using wire::MsgType;

// Writes `path` until the file system is full.
void FillUp(const std::filesystem::path& path) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  const std::string block(64 * 1024, 'x');
  while (std::fwrite(block.data(), 1, block.size(), f) == block.size()) {
  }
  for (int i = 0; i < 4096 && std::fputc('x', f) != EOF; ++i) {  // the last partial block
  }
  std::fclose(f);
}

TEST(ShardDiskFullTest, HoldsTheVersionKeepsServingAndPublishesAfterSpaceReturns) {
  const diloco::testing::TempDir tmp("shard_disk_full_");
  diloco::testing::Tmpfs fs(tmp.dir() / "mnt");
  if (!fs.mounted()) GTEST_SKIP() << "cannot mount a tmpfs here: " << fs.error();
  auto o = TinyOptions();
  o.store_path = (fs.dir() / "store").string();
  o.durability = Durability::kPerRound;
  o.checkpoint_retry = absl::Seconds(2);
  auto h = std::make_unique<ShardHarness>(o);
  const uint64_t n = h->fragment(0).numel;
  h->Hello("a", 1);
  ASSERT_EQ(Only(h->Init("a", 1, 0, std::vector<float>(n, 1.0f)), MsgType::PushAck)->header.ack,
            AckStatus::Initialized);

  FillUp(fs.dir() / "ballast");
  EXPECT_EQ(
      Only(h->Push("a", 1, 0, 1, 1, std::vector<float>(n, 0.1f)), MsgType::PushAck)->header.ack,
      AckStatus::Queued);
  EXPECT_TRUE(h->Tick().empty()) << "a version was published without being durable";
  EXPECT_GE(h->shard().counters().checkpoint_failures, 1u);
  // The operator is told why, where: errno text and path in the log, the progress line and
  // the Stats JSON; the absl code in a Prometheus gauge.
  const std::string cause = h->shard().counters().checkpoint_error;
  EXPECT_NE(cause.find("No space left on device"), std::string::npos) << cause;
  EXPECT_NE(cause.find(fs.dir().string()), std::string::npos) << cause;
  const auto lines = h->shard().TakeLogLines();
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("failed (RESOURCE_EXHAUSTED): " + cause), std::string::npos) << lines[0];
  EXPECT_NE(ProgressLine(h->shard()).find("FAILING: " + cause), std::string::npos)
      << ProgressLine(h->shard());
  EXPECT_NE(h->shard().StatsJson().find("\"checkpoint_error\":\"" + cause), std::string::npos)
      << h->shard().StatsJson();
  EXPECT_NE(PrometheusText(h->shard())
                .find("diloco_checkpoint_failing{shard=\"0\",code=\"RESOURCE_EXHAUSTED\"} 1"),
            std::string::npos);
  EXPECT_EQ(h->shard().published_version(0), 1u);
  auto pull = h->Base(MsgType::Pull, 1);
  pull.fragment_id = 0;
  const auto replies = h->Send("a", pull);
  const Outgoing* up = Only(replies, MsgType::FragmentUpdate);
  ASSERT_NE(up, nullptr);
  EXPECT_EQ(up->header.version, 1u);  // still serving the last durable version

  std::filesystem::remove(fs.dir() / "ballast");
  std::vector<Outgoing> published;
  for (int i = 0; i < 200 && published.empty(); ++i) {  // RocksDB polls for space to return
    h->clock().Advance(absl::Seconds(3));
    published = h->Tick();
    if (published.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(published.size(), 1u) << "never published after space returned";
  EXPECT_EQ(h->shard().counters().checkpoint_error, "");
  const auto recovered = h->shard().TakeLogLines();
  ASSERT_FALSE(recovered.empty());
  EXPECT_NE(recovered.back().find("written after"), std::string::npos) << recovered.back();
  EXPECT_NE(PrometheusText(h->shard()).find("diloco_checkpoint_failing{shard=\"0\",code=\"OK\"} 0"),
            std::string::npos);
  EXPECT_EQ(published[0].header.ack, AckStatus::Applied);
  EXPECT_EQ(published[0].header.version, 2u);
  const auto params = h->shard().params(0);

  h.reset();  // a crash after publishing: the version must be on disk
  ShardHarness again(o);
  EXPECT_EQ(again.shard().published_version(0), 2u);
  EXPECT_EQ(again.shard().params(0), params);
}

// The same reporting without a file system to fill (runs everywhere): the writes fail on
// demand through the writer's test hook with the status a full disk gives.
TEST(ShardDiskFullTest, AFailingWriteIsReportedWithItsCauseUntilOneSucceeds) {
  const diloco::testing::TempDir tmp("shard_failing_write_");
  const std::filesystem::path& dir = tmp.dir();
  auto o = TinyOptions();
  o.store_path = (dir / "store").string();
  o.durability = Durability::kPerRound;
  o.checkpoint_thread = false;  // each write inside Tick/Handle: no waiting
  const std::string cause =
      "writing tensor file /data/store/tensors/x.tensor.tmp: No space left on device";
  std::atomic<bool> failing{false};
  o.test_before_checkpoint_write = [&] {
    return failing ? absl::ResourceExhaustedError(cause) : absl::OkStatus();
  };
  {
    ShardHarness h(o);
    const uint64_t n = h.fragment(0).numel;
    h.Hello("a", 1);
    ASSERT_EQ(Only(h.Init("a", 1, 0, std::vector<float>(n, 1.0f)), MsgType::PushAck)->header.ack,
              AckStatus::Initialized);
    EXPECT_EQ(ProgressLine(h.shard()).find("FAILING"), std::string::npos);
    failing = true;
    (void)h.Push("a", 1, 0, 1, 1, std::vector<float>(n, 0.1f));
    for (int i = 0; i < 3; ++i) {  // three retries, one cause: one log line
      h.clock().Advance(o.checkpoint_retry);
      EXPECT_TRUE(h.Tick().empty()) << "published a version that is not durable";
    }
    const auto& c = h.shard().counters();
    EXPECT_GE(c.checkpoint_failures, 3u);
    EXPECT_EQ(c.checkpoint_error, cause);
    EXPECT_EQ(c.checkpoint_error_code, "RESOURCE_EXHAUSTED");
    const auto lines = h.shard().TakeLogLines();
    ASSERT_EQ(lines.size(), 1u) << "logged once per cause, not per retry";
    EXPECT_NE(lines[0].find("failed (RESOURCE_EXHAUSTED): " + cause), std::string::npos)
        << lines[0];
    EXPECT_NE(lines[0].find("new versions wait for it"), std::string::npos) << lines[0];
    EXPECT_NE(ProgressLine(h.shard()).find(" failed) FAILING: " + cause), std::string::npos)
        << ProgressLine(h.shard());
    EXPECT_NE(h.shard().StatsJson().find("\"checkpoint_error\":\"" + cause + "\""),
              std::string::npos)
        << h.shard().StatsJson();
    EXPECT_NE(PrometheusText(h.shard()).find(
                  "diloco_checkpoint_failing{shard=\"0\",code=\"RESOURCE_EXHAUSTED\"} 1"),
              std::string::npos);

    failing = false;  // space is back
    h.clock().Advance(o.checkpoint_retry);
    const auto published = h.Tick();
    ASSERT_EQ(published.size(), 1u);
    EXPECT_EQ(published[0].header.ack, AckStatus::Applied);
    EXPECT_EQ(h.shard().counters().checkpoint_error, "");
    const auto recovered = h.shard().TakeLogLines();
    ASSERT_EQ(recovered.size(), 1u);
    EXPECT_NE(recovered[0].find("written after "), std::string::npos) << recovered[0];
    EXPECT_EQ(ProgressLine(h.shard()).find("FAILING"), std::string::npos);
    EXPECT_NE(
        PrometheusText(h.shard()).find("diloco_checkpoint_failing{shard=\"0\",code=\"OK\"} 0"),
        std::string::npos);
  }
}

}  // namespace
}  // namespace diloco::server::testing
