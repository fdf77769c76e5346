// The round's merge rules (server/round_merge.h): what a round's pushes become, given where Admit
// said each push goes (written here as the shard's apply thread would decode it).
#include "server/round_merge.h"

#include <gtest/gtest.h>

#include <vector>

#include "kernels/outer.h"

namespace diloco::server {
namespace {

constexpr uint64_t kN = 5;

// Writes `delta` where `t` says, as the apply thread decodes a push.
void Decode(const RoundMerge::Target& t, const std::vector<float>& delta) {
  for (uint64_t i = 0; i < kN; ++i)
    t.values[i] = t.overwrite ? delta[i] : t.values[i] + t.scale * delta[i];
}

TEST(RoundMergeTest, WeightedMeanIsTheWeightedMeanScaledToTheShare) {
  BufferPool pool(1 << 20, absl::Seconds(1));
  auto merge = MakeRoundMerge(MergeRule::kWeightedMean, kN);
  std::shared_ptr<wire::Bytes> acc;
  const std::vector<float> a = {1, 2, 3, 4, 5}, b = {3, 0, -3, 8, 1};
  Decode(merge->Admit(1.0f, /*first=*/true, acc, pool), a);
  ASSERT_NE(acc, nullptr);  // the round's accumulator, taken on the first push
  Decode(merge->Admit(0.5f, /*first=*/false, acc, pool), b);
  merge->Close(/*share=*/0.75, /*weight_sum=*/1.5, /*merged=*/2, acc, pool);
  const auto out = Floats(*acc);
  for (uint64_t i = 0; i < kN; ++i)
    EXPECT_FLOAT_EQ(out[i], (a[i] + 0.5f * b[i]) / 1.5f * 0.75f) << i;
}

TEST(RoundMergeTest, AWeightedMeanOfNothingLeavesTheAccumulatorAlone) {
  BufferPool pool(1 << 20, absl::Seconds(1));
  auto merge = MakeRoundMerge(MergeRule::kWeightedMean, kN);
  std::shared_ptr<wire::Bytes> acc;
  merge->Close(0, 0, 0, acc, pool);  // every push of the round dropped
  EXPECT_EQ(acc, nullptr);
}

TEST(RoundMergeTest, RdaKeepsEveryDeltaAndMergesThemAtCloseRoundAfterRound) {
  BufferPool pool(1 << 20, absl::Seconds(1));
  auto merge = MakeRoundMerge(MergeRule::kRda, kN);
  const std::vector<float> a = {1, 2, 3, 4, 5}, b = {3, 0, -3, 8, 1};
  for (int round = 0; round < 2; ++round) {  // the second round starts from no kept delta
    std::shared_ptr<wire::Bytes> acc;
    Decode(merge->Admit(1.0f, true, acc, pool), a);
    Decode(merge->Admit(0.5f, false, acc, pool), b);
    EXPECT_EQ(acc, nullptr) << "RDA keeps the deltas, not a running sum";
    merge->Close(0.5, 1.5, 2, acc, pool);
    ASSERT_NE(acc, nullptr);
    std::vector<float> want(kN);
    const std::vector<std::span<const float>> deltas = {a, b};
    const std::vector<float> weights = {1.0f, 0.5f};
    ASSERT_TRUE(kernels::RdaMerge(deltas, weights, want).ok());
    const auto out = Floats(*acc);
    for (uint64_t i = 0; i < kN; ++i) EXPECT_FLOAT_EQ(out[i], want[i] * 0.5f) << round << " " << i;
  }
}

}  // namespace
}  // namespace diloco::server
