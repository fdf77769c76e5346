// --codec=auto and --inner_steps=auto against a real shard behind a rate-limited proxy
// (tests/util ThrottleProxy): on a link where a round at the smallest H cannot cross, the worker
// takes the default ladder's top-k and a larger H, its pushes of both kinds (int8 before the link
// is measured, top-k after) are applied by a shard at its default step choice, and when the link
// becomes fast it goes back to a finer choice. Bounded behaviour, not speed: the slow link is
// 10-20x too slow for the smallest H, the fast one hundreds of times faster than it needs, so the
// choices do not depend on this machine's load; every wait has a deadline.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/integration/cluster.h"
#include "tests/util/jsonl.h"
#include "tests/util/throttle_proxy.h"

namespace diloco::testing {
namespace {

// About 240K parameters in 2 fragments: an int8 push of one is ~120 KB, its int8 update too.
constexpr char kModel[] = "L=1,H=4,C=128,T=64,V=256";
constexpr double kSlowBytesPerSecond = 200e3;
constexpr double kFastBytesPerSecond = 50e6;

struct Choice {
  std::string codec;
  double h = 0;
};

std::vector<Choice> Choices(const std::filesystem::path& jsonl) {
  std::vector<Choice> out;
  for (const Json& j : ReadJsonLines(jsonl))
    if (EventName(j) == "link_choice")
      out.push_back({j.value("codec", ""), NumberAt(j, "inner_steps").value_or(0)});
  return out;
}

TEST(LinkAutoTest, ASlowLinkTakesTopKAndALargerHAndAFastOneGoesBack) {
  LocalShards shards;
  shards.dir = TestDir();
  shards.model = kModel;
  shards.StartShards(1, {"--fragments=2", "--worker_timeout=10s", "--download_codec=int8"});
  auto proxy = ThrottleProxy::Start(PortOf(shards.endpoints[0]), kSlowBytesPerSecond);
  ASSERT_TRUE(proxy.ok()) << proxy.status();

  // Steps of 20 ms: a round at H = 10 lasts 0.2 s, in which the slow link moves 20 KB of the
  // ~490 KB (int8 up and down) a round needs. The run ends with SIGTERM once the choices are seen.
  const auto jsonl = shards.dir / "worker.jsonl";
  Process w({WorkerBinary(), "--worker_id=0", "--fragments=2", absl::StrCat("--model=", kModel),
             "--device=synthetic", "--synthetic_step_time=20ms", "--codec=auto",
             "--inner_steps=auto", "--inner_steps_min=10", "--inner_steps_max=5000",
             "--servers=" + (*proxy)->endpoint(), "--heartbeat=200ms", "--shard_timeout=3s",
             "--join_timeout=60s", "--duration=240s", "--drain_timeout=20s", "--log_sync_events",
             "--progress_interval=1s", "--metrics_jsonl=" + jsonl.string()},
            (shards.dir / "worker.log").string());

  // Polls the worker's choices until `done` says so or `limit` passed.
  auto await = [&](absl::Duration limit, auto&& done) {
    const absl::Time deadline = absl::Now() + limit;
    std::vector<Choice> seen;
    while (absl::Now() < deadline && w.Running()) {
      seen = Choices(jsonl);
      if (!seen.empty() && done(seen.back())) break;
      absl::SleepFor(absl::Milliseconds(200));
    }
    return seen;
  };

  // The slow link (the join alone takes ~10 s through it): the sparse codec, with H well above
  // the smallest (a round's int8 update alone is 0.24 MB at 0.2 MB/s: H >= ~95 at margin 1.5).
  auto topk = [](const std::string& codec) { return codec.starts_with("topk:"); };
  const std::vector<Choice> slow =
      await(absl::Seconds(90), [&](const Choice& c) { return topk(c.codec) && c.h >= 50; });
  ASSERT_FALSE(slow.empty()) << "no link choice; see " << shards.dir;
  EXPECT_TRUE(topk(slow.back().codec)) << slow.back().codec;
  EXPECT_GE(slow.back().h, 50);
  const double slow_h = slow.back().h;

  // The fast link: a finer choice follows.
  (*proxy)->set_rate(kFastBytesPerSecond);
  const std::vector<Choice> all = await(
      absl::Seconds(90), [&](const Choice& c) { return c.codec == "int8:256" || c.h < slow_h; });
  ASSERT_GT(all.size(), slow.size()) << "no new choice after the link became fast";
  EXPECT_TRUE(all.back().codec == "int8:256" || all.back().h < slow_h)
      << all.back().codec << " H " << all.back().h << " (slow: H " << slow_h << ")";
  for (const Choice& c : all) std::printf("link choice: %s H %.0f\n", c.codec.c_str(), c.h);
  w.Signal(SIGTERM);
  ASSERT_EQ(w.Wait(absl::Seconds(60)), std::optional<int>(0)) << "see " << shards.dir;

  // Pushes were applied on both links, of both kinds, none refused: the shard steps each push as
  // its codec asks (a fragment's first push no longer fixes its step).
  const auto done = ReadEvents(jsonl, "done");
  ASSERT_EQ(done.size(), 1u);
  EXPECT_GE(done.back().at("applied"), 4);
  EXPECT_EQ(done.back().at("refused"), 0);
  int topk_pushes = 0, dense_pushes = 0;
  for (const Json& j : ReadJsonLines(jsonl))
    if (EventName(j) == "push") ++(topk(j.value("codec", "")) ? topk_pushes : dense_pushes);
  EXPECT_GE(topk_pushes, 1);
  EXPECT_GE(dense_pushes, 1);
  for (auto& s : shards.shards) s->Signal(SIGTERM);
  for (auto& s : shards.shards) s->Wait(absl::Seconds(10));
}

}  // namespace
}  // namespace diloco::testing
