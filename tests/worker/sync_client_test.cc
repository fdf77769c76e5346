// The sync client in-process against a real diloco-server: AfterStep with a ParamsFn fetches
// the parameters only on steps that adopt, push or snapshot, which is what lets a GPU trainer
// skip the device-to-host copy on every other step.
#include "worker/sync_client.h"

#include <gtest/gtest.h>

#include <cmath>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/model_spec.h"
#include "tests/integration/cluster.h"

namespace diloco::testing {
namespace {

// One shard of the tiny model (4 fragments) and a client's options for it: int8 pushes, every
// fragment due on the same step once every `inner_steps`.
worker::SyncOptions OneShardOptions(LocalShards& shards, uint32_t inner_steps,
                                    const std::vector<std::string>& server_flags = {}) {
  shards.dir = TestDir();
  shards.StartShards(1, server_flags);
  worker::SyncOptions o;
  o.servers = shards.endpoints;
  o.worker_id = 0;
  o.num_fragments = 4;
  o.codec = *kernels::ParseCodec("int8:256");
  o.inner_steps = inner_steps;
  o.stream = false;
  return o;
}

TEST(SyncClientTest, AfterStepFetchesParamsOnlyOnStepsThatUseThem) {
  LocalShards shards;
  const worker::SyncOptions o = OneShardOptions(shards, 20);
  auto manifest = GptManifest(*ParseGptConfig("tiny"));
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  std::vector<float> params(manifest->total_elements(), 0.01f);
  auto client = worker::SyncClient::Create(o, *manifest);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Join(params, absl::Seconds(20)).ok());

  constexpr int kSteps = 200;
  int fetches = 0;
  for (int s = 0; s < kSteps; ++s) {
    for (float& p : params) p -= 1e-4f;  // what training would do between steps
    (*client)->AfterStep(
        [&] {
          ++fetches;
          return std::span<float>(params);
        },
        64, absl::Milliseconds(5));
    absl::SleepFor(absl::Milliseconds(5));
  }
  ASSERT_TRUE((*client)->Drain(params, absl::Seconds(10)).ok());
  const worker::SyncStats st = (*client)->stats();
  // Up to 9 push steps (4 pushes each; 36-40 pushes here, fewer if answers are slow) and the
  // steps on which their answers were adopted: the parameters were needed on 19-26 of the 200
  // steps here, never on every one.
  EXPECT_GE(st.pushes, 4u * 5);
  EXPECT_EQ(st.applied, st.pushes) << "lazily fetched parameters still made valid pushes";
  EXPECT_GE(fetches, static_cast<int>(st.pushes / 4));
  EXPECT_LE(fetches, kSteps / 3) << "fetched on " << fetches << " of " << kSteps << " steps";
}

// A push damaged on the way (one flipped payload byte under the true checksums) is refused
// BadChecksum naming it; the worker sends the same push once more. Damaged twice, it is given
// up (refused) and the worker pulls and goes on; the other pushes are unaffected.
class DamagedPushTest : public ::testing::TestWithParam<uint32_t> {};

TEST_P(DamagedPushTest, IsSentAgainOnceThenGivenUp) {
  const uint32_t damaged_sends = GetParam();
  LocalShards shards;
  worker::SyncOptions o = OneShardOptions(shards, 10);
  o.test_corrupt_push_sends = damaged_sends;
  auto manifest = GptManifest(*ParseGptConfig("tiny"));
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  std::vector<float> params(manifest->total_elements(), 0.01f);
  auto client = worker::SyncClient::Create(o, *manifest);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Join(params, absl::Seconds(20)).ok());
  // At least two push steps of 4 pushes each (bounded: answers may be slow under load).
  for (int s = 0; s < 1000 && (s < 30 || (*client)->stats().pushes < 8); ++s) {
    for (float& p : params) p -= 1e-4f;
    (*client)->AfterStep([&] { return std::span<float>(params); }, 64, absl::Milliseconds(5));
    absl::SleepFor(absl::Milliseconds(20));
  }
  ASSERT_TRUE((*client)->Drain(params, absl::Seconds(20)).ok());
  const worker::SyncStats st = (*client)->stats();
  std::vector<worker::SyncEvent> refused;
  for (auto& e : (*client)->TakeEvents())
    if (e.kind == worker::SyncEvent::kRefused) refused.push_back(e);
  EXPECT_EQ(shards.Stat(0, "refused_by_reason.BadChecksum"), damaged_sends);
  EXPECT_GE(st.resends, 1u);
  EXPECT_GE(st.pushes, 8u);
  if (damaged_sends == 1) {
    EXPECT_EQ(st.applied, st.pushes) << "the resent push was not applied";
    EXPECT_TRUE(refused.empty());
  } else {
    EXPECT_EQ(st.refused, 1u);
    EXPECT_EQ(st.applied, st.pushes - 1);
    ASSERT_EQ(refused.size(), 1u);
    EXPECT_EQ(refused[0].fragment, 0u);
    EXPECT_EQ(refused[0].seq, 1u);
  }
}

INSTANTIATE_TEST_SUITE_P(Sends, DamagedPushTest, ::testing::Values(1u, 2u));

// An applied push whose Applied answer was lost (the shard killed between making it durable and
// sending it, then restarted on its store) is answered Duplicate after the resend; the update
// the worker then pulls is that push's answer, and adoption takes its delta out exactly once.
// Same setting as above (one worker, fp32, outer lr 1, no momentum, lockstep): had the pulled
// update not been taken as the push's answer, the pushed work would be counted twice.
TEST(SyncClientTest, APushWhoseAppliedAnswerWasLostIsAdoptedOnce) {
  LocalShards shards;
  const std::vector<std::string> flags = {"--durability=per-round", "--outer_lr=1",
                                          "--outer_momentum=0"};
  std::vector<std::string> first = flags;
  first.push_back("--test_kill_after_applied=6");  // the second push step's answers die unsent
  worker::SyncOptions o = OneShardOptions(shards, 5, first);
  o.codec = *kernels::ParseCodec("fp32");
  o.lockstep = true;
  o.shard_timeout = absl::Milliseconds(500);
  auto manifest = GptManifest(*ParseGptConfig("tiny"));
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  // The shard kills itself; it comes back on the same address and store.
  std::thread restarter([&] {
    if (shards.shards[0]->Wait(absl::Seconds(60)).has_value())
      shards.shards[0] = shards.StartShard(0, 1, shards.endpoints[0], flags);
  });
  std::vector<float> params(manifest->total_elements(), 1.0f);
  std::vector<float> alone(params.size(), 1.0f);  // the same training without sync
  auto client = worker::SyncClient::Create(o, *manifest);
  ASSERT_TRUE(client.ok()) << client.status();
  ASSERT_TRUE((*client)->Join(params, absl::Seconds(20)).ok());
  constexpr int kSteps = 40;
  for (int s = 0; s < kSteps; ++s) {
    for (float& p : params) p -= 1e-4f;
    for (float& p : alone) p -= 1e-4f;
    (*client)->AfterStep(params, 64, absl::Milliseconds(1));
  }
  ASSERT_TRUE((*client)->Drain(params, absl::Seconds(20)).ok());
  restarter.join();
  const worker::SyncStats st = (*client)->stats();
  EXPECT_EQ(st.shard_restarts, 1u);
  EXPECT_GE(st.duplicates, 1u) << "no Applied answer was lost: the case is not exercised";
  EXPECT_EQ(st.applied + st.duplicates, st.pushes);
  for (size_t i = 0; i < params.size(); ++i)
    ASSERT_NEAR(params[i], alone[i], 2e-5f) << "element " << i << " counted a push twice";
  // Every push applied once: the global values are the local ones (the run ends on a push).
  const std::span<const float> global = (*client)->global_params();
  EXPECT_NEAR(global[0], params[0], 2e-5f);
}

}  // namespace
}  // namespace diloco::testing
