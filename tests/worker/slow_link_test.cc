// A worker behind a slow link (tests/util ThrottleProxy: 500 KB/s shared by its connections)
// to a shard whose one fragment takes ~2 s to cross, twice the worker's 1 s shard timeout. With the
// control connection, heartbeats cross beside the transfer: the worker joins, pushes and adopts
// without a single reconnect. Without it (--control_channel=false), the heartbeat replies queue
// behind the fragment, the worker judges the shard dead, reconnects and restarts the transfer it
// was waiting for, and never joins: the failure the control connection exists to prevent.
#include <gtest/gtest.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "tests/integration/cluster.h"
#include "tests/util/throttle_proxy.h"

namespace diloco::testing {
namespace {

// About 240K parameters: one fp32 fragment is ~0.96 MB, ~2 s at the proxy's rate.
constexpr char kModel[] = "L=1,H=4,C=128,T=64,V=256";
constexpr double kLinkBytesPerSecond = 500e3;

int PortOf(const std::string& endpoint) {
  int port = 0;
  const std::vector<std::string> parts = absl::StrSplit(endpoint, ':');
  EXPECT_TRUE(!parts.empty() && absl::SimpleAtoi(parts.back(), &port)) << endpoint;
  return port;
}

class SlowLinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shards_.dir = TestDir();
    shards_.model = kModel;
    // Whole fp32 answers (not quantized updates): every Applied answer is a ~2 s fragment too.
    shards_.StartShards(1, {"--fragments=1", "--worker_timeout=3s", "--download_codec=fp32"});
    auto p = ThrottleProxy::Start(PortOf(shards_.endpoints[0]), kLinkBytesPerSecond);
    ASSERT_TRUE(p.ok()) << p.status();
    proxy_ = std::move(*p);
  }
  void TearDown() override {
    for (auto& s : shards_.shards) s->Signal(SIGTERM);
    for (auto& s : shards_.shards) s->Wait(absl::Seconds(10));
  }

  // Runs one worker through the proxy to its end; returns its "done" event.
  Event RunWorker(bool control_channel, const std::string& join_timeout,
                  const std::string& duration) {
    const auto jsonl = shards_.dir / absl::StrCat("worker-", control_channel, ".jsonl");
    Process w({WorkerBinary(), "--worker_id=0", "--fragments=1", absl::StrCat("--model=", kModel),
               "--codec=int8", "--inner_steps=10", "--batch=2", "--threads=1", "--eval_batches=1",
               "--servers=" + proxy_->endpoint(), "--heartbeat=200ms", "--shard_timeout=1s",
               absl::StrCat("--control_channel=", control_channel ? "true" : "false"),
               "--join_timeout=" + join_timeout, "--duration=" + duration, "--drain_timeout=8s",
               "--log_sync_events", "--metrics_jsonl=" + jsonl.string()},
              (shards_.dir / absl::StrCat("worker-", control_channel, ".log")).string());
    EXPECT_EQ(w.Wait(absl::Seconds(90)), std::optional<int>(0));
    joined_ = !ReadEvents(jsonl, "joined").empty();
    auto done = ReadEvents(jsonl, "done");
    EXPECT_EQ(done.size(), 1u);
    return done.empty() ? Event{} : done.back();
  }

  LocalShards shards_;
  std::unique_ptr<ThrottleProxy> proxy_;
  bool joined_ = false;
};

TEST_F(SlowLinkTest, ControlConnectionKeepsHeartbeatsFlowingBesideAFragment) {
  const Event done = RunWorker(true, "40s", "10s");
  EXPECT_TRUE(joined_);
  EXPECT_EQ(done.at("reconnects"), 0);
  // The fragment takes ~2 s to cross, twice the first re-ask interval (join_retry, 1 s): it is
  // asked for once, not again while it is still on its way (worker/link_pace.h).
  EXPECT_EQ(done.at("join_asks"), 1);
  EXPECT_GE(done.at("applied"), 1);  // a push answered by a ~2 s FragmentUpdate
  EXPECT_EQ(done.at("refused"), 0);
  EXPECT_GE(shards_.Stat(0, "versions.0"), 2);  // theta(0) uploaded, then a round closed
  // Everything crossed the slow link: at least theta(0) up and a fragment down.
  EXPECT_GT(proxy_->bytes_forwarded(), 2 * 0.9e6);
}

TEST_F(SlowLinkTest, WithoutItHeartbeatsQueueBehindTheFragmentAndTheWorkerNeverJoins) {
  const Event done = RunWorker(false, "12s", "1s");
  EXPECT_FALSE(joined_);
  EXPECT_GE(done.at("reconnects"), 2);
  EXPECT_EQ(shards_.Stat(0, "versions.0"), 0);  // the theta(0) upload never completed
}

}  // namespace
}  // namespace diloco::testing
