// The sync client in-process against a real diloco-server: AfterStep with a ParamsFn fetches
// the parameters only on steps that adopt, push or snapshot, which is what lets a GPU trainer
// skip the device-to-host copy on every other step.
#include "worker/sync_client.h"

#include <gtest/gtest.h>

#include <span>
#include <vector>

#include "absl/time/clock.h"
#include "common/model_spec.h"
#include "tests/integration/cluster.h"

namespace diloco::testing {
namespace {

TEST(SyncClientTest, AfterStepFetchesParamsOnlyOnStepsThatUseThem) {
  LocalShards shards;
  shards.dir = TestDir();
  shards.StartShards(1);  // 4 fragments of the tiny model
  auto manifest = GptManifest(*ParseGptConfig("tiny"));
  ASSERT_TRUE(manifest.ok()) << manifest.status();
  std::vector<float> params(manifest->total_elements(), 0.01f);

  worker::SyncOptions o;
  o.servers = shards.endpoints;
  o.worker_id = 0;
  o.num_fragments = 4;
  o.codec = *kernels::ParseCodec("int8:256");
  o.inner_steps = 20;
  o.stream = false;  // all 4 fragments due on the same step, once every 20 steps
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

}  // namespace
}  // namespace diloco::testing
