// A worker behind a slow link (tests/util ThrottleProxy: 500 KB/s shared by its connections)
// to a shard whose one fragment takes ~2 s to cross, twice the worker's 1 s shard timeout. With the
// control connection, heartbeats cross beside the transfer: the worker joins, pushes and adopts
// without a single reconnect. Without it (--control_channel=false), the heartbeat replies queue
// behind the fragment, the worker judges the shard dead, reconnects and restarts the transfer it
// was waiting for, and never joins: the failure the control connection exists to prevent.
//
// A link that drops in the middle of a push (the proxy closes every connection once a set number
// of bytes went up): the worker reconnects at once, the shard's Welcome lists the push's chunks
// it kept, and only the rest cross again; the push is applied having crossed about once.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/codec.h"
#include "schema/payload_layout.h"
#include "schema/transport.h"
#include "tests/integration/cluster.h"
#include "tests/util/throttle_proxy.h"

namespace diloco::testing {
namespace {

// About 240K parameters: one fp32 fragment is ~0.96 MB, ~2 s at the proxy's rate.
constexpr char kModel[] = "L=1,H=4,C=128,T=64,V=256";
constexpr double kLinkBytesPerSecond = 500e3;

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

// About 2.45M parameters in one fragment: an int8 push is a train of three chunks (two of 1 Mi
// values and a last of ~0.35 Mi), theta(0) and the join ~9.8 MB of fp32 each.
constexpr char kCutModel[] = "L=3,H=4,C=256,T=64,V=256";
constexpr double kCutLinkBytesPerSecond = 4e6;

class CutLinkTest : public ::testing::Test {
 protected:
  void SetUp() override {
    shards_.dir = TestDir();
    shards_.model = kCutModel;
    shards_.StartShards(1, {"--fragments=1", "--worker_timeout=10s"});
    auto p = ThrottleProxy::Start(PortOf(shards_.endpoints[0]), kCutLinkBytesPerSecond);
    ASSERT_TRUE(p.ok()) << p.status();
    proxy_ = std::move(*p);
  }
  void TearDown() override {
    for (auto& s : shards_.shards) s->Signal(SIGTERM);
    for (auto& s : shards_.shards) s->Wait(absl::Seconds(10));
  }

  // A worker of kCutModel through the proxy, its events in worker.jsonl, with `args` besides.
  std::unique_ptr<Process> StartWorker(const std::vector<std::string>& args) {
    std::vector<std::string> argv = {WorkerBinary(),
                                     "--worker_id=0",
                                     "--fragments=1",
                                     absl::StrCat("--model=", kCutModel),
                                     "--batch=2",
                                     "--threads=1",
                                     "--eval_batches=1",
                                     "--servers=" + proxy_->endpoint(),
                                     "--heartbeat=200ms",
                                     "--shard_timeout=2s",
                                     "--join_timeout=60s",
                                     "--log_sync_events",
                                     "--metrics_jsonl=" + (shards_.dir / "worker.jsonl").string()};
    argv.insert(argv.end(), args.begin(), args.end());
    return std::make_unique<Process>(argv, (shards_.dir / "worker.log").string());
  }
  // Waits until the shard holds theta(0) (a minute at most, and no longer than `worker` runs).
  void WaitForThetaZero(Process& worker) {
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    bool running = true;
    while (running && shards_.Stat(0, "versions.0") < 1 && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
      running = worker.Running();
    }
    ASSERT_GE(shards_.Stat(0, "versions.0"), 1)
        << "theta(0) never arrived"
        << (running ? ""
                    : absl::StrCat("; the worker exited with status ",
                                   worker.Wait(absl::ZeroDuration()).value_or(-1), ", see ",
                                   (shards_.dir / "worker.log").string()));
  }

  LocalShards shards_;
  std::unique_ptr<ThrottleProxy> proxy_;
};

// With --keep_cut_trains_mib=0 on the shard this fails: trains_kept 0, and the worker sent 2.000x
// the push, 1.93x went up the link (measured 2026-12-04).
TEST_F(CutLinkTest, APushCutInTheMiddleResumesFromTheChunksTheShardHoldsAndCrossesOnce) {
  // One push (inner steps 5 of 7), then the drain waits for its answer.
  auto w = StartWorker({"--codec=int8", "--inner_steps=5", "--steps=7", "--drain_timeout=30s"});
  // Once theta(0) is in, the only large message up the link is the push: the cut is armed to
  // fall in its last chunk, after its first two crossed.
  ASSERT_NO_FATAL_FAILURE(WaitForThetaZero(*w));
  const auto codec = kernels::ParseCodec("int8");
  ASSERT_TRUE(codec.ok());
  const wire::PayloadLayout layout(*codec, static_cast<uint64_t>(shards_.Stat(0, "params")));
  ASSERT_EQ(layout.chunks(), 3u);
  const uint64_t push = layout.bytes(), last = layout.chunk(2).bytes;
  const uint64_t up_before = proxy_->bytes_upstream();
  proxy_->CutAfter(push - last / 2);

  ASSERT_EQ(w->Wait(absl::Seconds(120)), std::optional<int>(0));
  const auto done = ReadEvents(shards_.dir / "worker.jsonl", "done");
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(proxy_->cuts(), 1u);
  EXPECT_EQ(done[0].at("pushes"), 1);
  EXPECT_EQ(done[0].at("applied"), 1);
  EXPECT_EQ(done[0].at("refused"), 0);
  EXPECT_GE(done[0].at("reconnects"), 1);
  EXPECT_EQ(shards_.Stat(0, "trains_kept"), 1);
  EXPECT_EQ(shards_.Stat(0, "trains_resumed"), 1);
  EXPECT_EQ(shards_.Stat(0, "versions.0"), 2);
  // Crossed about once: what the worker handed to its socket for the push (the whole first
  // send, then the last chunk), and what went up the link after the cut was armed (the push up
  // to the cut, the last chunk again, heartbeats and a Hello). Sent whole again, each would be
  // ~2x the push.
  const double sent = done[0].at("bytes_sent"), up = proxy_->bytes_upstream() - up_before;
  EXPECT_LT(sent, 1.3 * push) << sent << " bytes sent for a push of " << push;
  EXPECT_LT(up, 1.3 * push) << up << " bytes up the link for a push of " << push;
  std::printf("push %lu B: the worker sent %.0f B (%.3fx), %.0f B went up the link (%.3fx)\n",
              static_cast<unsigned long>(push), sent, sent / push, up, up / push);
}

// With --keep_cut_trains_mib=0 on the shard this fails: init_resumed 0, trains_kept 0, and the
// worker sent 2.000x theta(0), 1.93x went up the link (measured 2026-12-04).
// theta(0) is the first and largest train up the link: cut in its last chunk, the upload goes on
// from the chunks the shard kept once the worker has reconnected (the worker does not train
// before it has joined, so it hands over the same values again: the same train checksum).
TEST_F(CutLinkTest, AThetaZeroUploadCutInTheMiddleResumesAndCrossesOnce) {
  const uint64_t params = static_cast<uint64_t>(shards_.Stat(0, "params"));
  const wire::PayloadLayout layout(wire::kFragmentCodec, params);
  ASSERT_EQ(layout.chunks(), 3u);
  const uint64_t theta = layout.bytes(), last = layout.chunk(2).bytes;
  // Hellos, Welcomes and heartbeats before it are a few KB: the cut falls in the last chunk.
  proxy_->CutAfter(theta - last / 2);
  auto w = StartWorker({"--steps=1", "--inner_steps=5", "--drain_timeout=10s"});
  ASSERT_NO_FATAL_FAILURE(WaitForThetaZero(*w));
  const double up = proxy_->bytes_upstream();
  ASSERT_EQ(w->Wait(absl::Seconds(60)), std::optional<int>(0));
  const auto done = ReadEvents(shards_.dir / "worker.jsonl", "done");
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(proxy_->cuts(), 1u);
  EXPECT_GE(done[0].at("reconnects"), 1);
  EXPECT_EQ(done[0].at("init_resumed"), 1);
  EXPECT_EQ(shards_.Stat(0, "trains_kept"), 1);
  EXPECT_EQ(shards_.Stat(0, "trains_resumed"), 1);
  const double sent = done[0].at("init_bytes_sent");
  EXPECT_LT(sent, 1.3 * theta) << sent << " bytes of theta(0) sent for " << theta;
  EXPECT_LT(up, 1.3 * theta) << up << " bytes up the link for theta(0) of " << theta;
  std::printf("theta(0) %lu B: the worker sent %.0f B (%.3fx), %.0f B went up the link (%.3fx)\n",
              static_cast<unsigned long>(theta), sent, sent / theta, up, up / theta);
}

}  // namespace
}  // namespace diloco::testing
