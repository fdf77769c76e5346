// Leaving, end to end against a real diloco-server on 127.0.0.1 (docs/protocol.md, "Leaving"):
// two learners at --quorum=2 without --elastic_quorum, one done early. Its Drain tells the
// shard it leaves, so the other's rounds close on its push alone, at once rather than at the
// 30 s grace cap, and, once the worker timeout has passed since the leave, move theta by its
// whole work (share 1) rather than half of it (the leaver counted as a zero delta). And
// diloco-worker stopped by SIGTERM leaves too.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "kernels/codec.h"
#include "tests/integration/cluster.h"
#include "worker/model/gpt/gpt_config.h"
#include "worker/sync_client.h"

namespace diloco::testing {
namespace {

constexpr uint32_t kH = 5;  // inner steps per push, every fragment on the same step

// The training a step stands for: a small move of every parameter.
void Step(std::vector<float>& params, float scale) {
  for (size_t i = 0; i < params.size(); ++i)
    params[i] -= scale * 1e-3f * static_cast<float>(i % 7 + 1);
}

// Fragment rounds hold the pushes of the learners present: with outer lr 1 and no momentum a
// round moves theta by exactly its share of the pushes' mean delta, and fp32 pushes and
// downloads keep that exact, so a learner alone in its round (share 1) adopts its own local
// values; counted as half of a fleet of two (share 1/2) it would adopt the midpoint.
TEST(LeaveClusterTest, AfterOneLearnerLeavesTheOthersRoundsCloseAtOnceWithTheWholeStep) {
  LocalShards shards;
  shards.dir = TestDir();
  shards.StartShards(1, {"--quorum=2", "--grace_cap=30s", "--worker_timeout=3s", "--outer_lr=1",
                         "--outer_momentum=0", "--download_codec=fp32"});
  auto manifest = GptManifest(*ParseGptConfig("tiny"));
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  auto options = [&](uint32_t id) {
    worker::SyncOptions o;
    o.servers = shards.endpoints;
    o.worker_id = id;
    o.num_fragments = 4;
    o.codec = *kernels::ParseCodec("fp32:256");
    o.inner_steps = kH;
    o.stream = false;
    o.lockstep = true;  // each push step waits for its round: its time is the round's
    return o;
  };
  auto a = worker::SyncClient::Create(options(1), *manifest);
  auto b = worker::SyncClient::Create(options(2), *manifest);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<float> pa(manifest->total_elements(), 0.01f), pb = pa;
  ASSERT_TRUE((*a)->Join(pa, absl::Seconds(20)).ok());
  ASSERT_TRUE((*b)->Join(pb, absl::Seconds(20)).ok());

  // Three rounds together, then b is done: drained, and gone from the shard.
  absl::Status b_drained;
  std::thread tb([&] {
    for (uint32_t s = 0; s < 3 * kH; ++s) {
      Step(pb, 2.0f);
      (*b)->AfterStep(pb, 64, absl::Milliseconds(5));
    }
    b_drained = (*b)->Drain(pb, absl::Seconds(20));
  });
  for (uint32_t s = 0; s < 3 * kH; ++s) {
    Step(pa, 1.0f);
    (*a)->AfterStep(pa, 64, absl::Milliseconds(5));
  }
  tb.join();
  ASSERT_TRUE(b_drained.ok()) << b_drained;
  EXPECT_EQ((*b)->stats().applied, 3u * 4) << "three rounds of four fragments";
  EXPECT_EQ((*b)->shards_left(), 1u);
  EXPECT_EQ(shards.Stat(0, "leaves"), 1);
  EXPECT_EQ(shards.Stat(0, "rounds"), 3 * 4);

  // b weighs as a zero delta for the worker timeout (3 s) after its Leave, as a silent worker
  // does; past that, a alone: each push step's round closes on its push, far within the 30 s
  // cap, and theta moves to a's local values.
  absl::SleepFor(absl::Milliseconds(3500));
  int rounds = 0;
  for (uint32_t s = 0; s < 3 * kH; ++s) {
    Step(pa, 1.0f);
    const std::vector<float> pushed = pa;
    const std::vector<float> anchor((*a)->global_params().begin(), (*a)->global_params().end());
    const uint64_t pushes = (*a)->stats().pushes;
    const absl::Time t0 = absl::Now();
    (*a)->AfterStep(pa, 64, absl::Milliseconds(5));
    const absl::Duration took = absl::Now() - t0;
    if ((*a)->stats().pushes == pushes) continue;
    ++rounds;
    EXPECT_LT(took, absl::Seconds(10)) << "round " << rounds << " waited for the departed learner";
    std::span<const float> global = (*a)->global_params();
    float off = 0, moved = 0;
    for (size_t i = 0; i < pushed.size(); ++i) {
      off = std::max(off, std::fabs(global[i] - pushed[i]));
      moved = std::max(moved, std::fabs(anchor[i] - pushed[i]));
    }
    EXPECT_GT(moved, 4e-3f);  // kH steps of up to 1e-3 each: a half step would miss by half
    EXPECT_LT(off, 1e-5f) << "round " << rounds << ": theta moved by less than a's whole work";
  }
  EXPECT_EQ(rounds, 3);
  EXPECT_EQ(shards.Stat(0, "rounds"), 6 * 4);
  ASSERT_TRUE((*a)->Drain(pa, absl::Seconds(20)).ok());
  EXPECT_EQ((*a)->shards_left(), 1u);
  EXPECT_EQ(shards.Stat(0, "leaves"), 2);
}

// diloco-worker stopped by SIGTERM drains and leaves every shard: the shards count the leave
// at once (their liveness timeout here is two minutes).
TEST(LeaveClusterTest, AWorkerStoppedBySigtermLeavesEveryShard) {
  LocalShards shards;
  shards.dir = TestDir();
  shards.StartShards(2, {"--worker_timeout=120s"});
  const auto jsonl = shards.dir / "worker1.jsonl";
  std::vector<std::string> argv = TinyWorkerArgs(1, shards.endpoints, jsonl);
  argv.push_back("--duration=600s");
  Process worker(argv, (shards.dir / "worker1.log").string());
  const absl::Time end = absl::Now() + absl::Seconds(60);
  while (absl::Now() < end && (shards.Stat(0, "rounds") < 1 || shards.Stat(1, "rounds") < 1))
    absl::SleepFor(absl::Milliseconds(200));
  ASSERT_GE(shards.Stat(0, "rounds"), 1) << "the worker never pushed";
  EXPECT_EQ(shards.Stat(0, "leaves"), 0);
  worker.Signal(SIGTERM);
  EXPECT_EQ(worker.Wait(absl::Seconds(30)), std::optional<int>(0));
  for (int s = 0; s < 2; ++s) EXPECT_EQ(shards.Stat(s, "leaves"), 1) << "shard " << s;
}

}  // namespace
}  // namespace diloco::testing
