// A real diloco-server holding a GPT-2 124M shard (one shard, 8 fragments, ~124M parameters),
// fed by a synthetic pusher (tests/integration/synthetic_pusher.h: int8 deltas, no model math),
// in each durability mode. Checks what once failed at this size (benchmarks/server/RESULTS.md,
// "At size"): every push is applied, the shard counts no bad message and refuses nothing, its
// resident memory stays within 12.5 bytes per parameter at steady state and its peak within its
// bound (memory_bound.h), and after kill -9 the restarted shard serves exactly the state it last
// published (every fragment's version and values).
//
// Bounded: ~1.5 GB per shard process (one at a time), a few rounds, every wait bounded.
// Behaviour only: no timing assertion.
#include <gtest/gtest.h>

#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/process_memory.h"
#include "tests/integration/cluster.h"
#include "tests/integration/memory_bound.h"
#include "tests/integration/synthetic_pusher.h"

namespace diloco::testing {
namespace {

constexpr char kModel[] = "gpt2-124m";
constexpr uint32_t kFragments = 8;
constexpr int kRounds = 3;
class SizeTest : public ::testing::TestWithParam<std::string> {};

TEST_P(SizeTest, ShardOf124MAppliesEveryPushAndRecoversWhatItPublished) {
  const std::string durability = GetParam();
  LocalShards c;
  c.dir = TestDir();
  c.model = kModel;
  const std::vector<std::string> flags = {absl::StrCat("--fragments=", kFragments),
                                          "--durability=" + durability, "--checkpoint_interval=1s",
                                          "--worker_timeout=60s", "--quorum=1"};
  c.StartShards(1, flags);
  ASSERT_EQ(c.endpoints.size(), 1u);
  auto pusher =
      SyntheticPusher::Create(c.endpoints, kModel, kFragments, *kernels::ParseCodec("int8:256"));
  ASSERT_TRUE(pusher.ok()) << pusher.status();
  SyntheticPusher& p = **pusher;
  const double params = static_cast<double>(p.params());
  ASSERT_GE(params, 100e6);
  ASSERT_TRUE(p.InitAll().ok());
  for (int r = 0; r < kRounds; ++r) {
    auto s = p.PushAll();
    ASSERT_TRUE(s.ok()) << "round " << r << ": " << s;
  }
  EXPECT_EQ(p.pushes_applied(), uint64_t{kRounds} * kFragments);

  // Steady state: every round closed and published, no push open.
  auto mem = ReadProcessMemory(c.shards[0]->pid());
  ASSERT_TRUE(mem.ok()) << mem.status();
  const double rss = mem->resident_bytes / params, hwm = mem->peak_resident_bytes / params;
  // The peak covers the whole run so far: start, theta(0), every round and checkpoint.
  std::printf(
      "shard %s: %.0f params, resident %.2f B/param (bound %.1f), peak %.2f B/param (bound "
      "%.1f)\n",
      durability.c_str(), params, rss, kShardBoundBytesPerParam, hwm, kShardPeakBoundBytesPerParam);
  if (kMemoryIsTheProducts) {
    EXPECT_LE(rss, kShardBoundBytesPerParam);
    EXPECT_LE(hwm, kShardPeakBoundBytesPerParam) << "the shard's peak";
  }

  EXPECT_EQ(c.Stat(0, "bad_messages"), 0);
  EXPECT_EQ(c.Stat(0, "pushes.refused"), 0);
  EXPECT_EQ(c.Stat(0, "pushes.no_credit"), 0);
  EXPECT_EQ(c.Stat(0, "pushes.stale"), 0);
  EXPECT_EQ(c.Stat(0, "pushes.queued"), kRounds * kFragments);
  EXPECT_EQ(c.Stat(0, "rounds"), kRounds * kFragments);
  EXPECT_EQ(c.Stat(0, "checkpoint_failures"), 0);
  for (const auto& [f, seen] : p.last_applied()) {
    EXPECT_EQ(seen.version, 1u + kRounds) << "fragment " << f;
    EXPECT_EQ(c.Stat(0, absl::StrCat("versions.", f)), seen.version) << "fragment " << f;
  }

  // Per-round: published means durable. Periodic: the next checkpoint (1 s) takes the rest.
  const absl::Time end = absl::Now() + absl::Seconds(60);
  auto all_durable = [&] {
    for (const auto& [f, seen] : p.last_applied())
      if (c.Stat(0, absl::StrCat("durable.", f)) != seen.version) return false;
    return true;
  };
  if (durability == "per-round") {
    EXPECT_TRUE(all_durable());
  }
  while (!all_durable() && absl::Now() < end) absl::SleepFor(absl::Milliseconds(100));
  ASSERT_TRUE(all_durable()) << "the published versions were not checkpointed within 60 s";

  c.shards[0]->Signal(SIGKILL);
  ASSERT_TRUE(c.shards[0]->Wait(absl::Seconds(30)).has_value());
  c.shards.clear();  // the dead shard's memory goes before the restarted one loads
  c.StartShards(1, flags);
  ASSERT_TRUE(p.Connect(c.endpoints).ok());
  for (const auto& [f, seen] : p.last_applied()) {
    auto now = p.Pull(f);
    ASSERT_TRUE(now.ok()) << now.status();
    EXPECT_EQ(now->version, seen.version) << "fragment " << f;
    EXPECT_EQ(now->checksum, seen.checksum) << "fragment " << f << ": values differ";
  }
  EXPECT_EQ(c.Stat(0, "bad_messages"), 0);
  c.shards[0]->Signal(SIGTERM);
  EXPECT_TRUE(c.shards[0]->Wait(absl::Seconds(60)).has_value());
}

INSTANTIATE_TEST_SUITE_P(Durability, SizeTest, ::testing::Values("periodic", "per-round"),
                         [](const auto& info) {
                           return info.param == "periodic" ? std::string("Periodic")
                                                           : std::string("PerRound");
                         });

}  // namespace
}  // namespace diloco::testing
