// The CUDA trainer's attention choice (worker/model/cuda/gpt_cuda.h, ChooseAttention): plain
// C++, so it runs here without a GPU. kAuto takes the materialized attention (the faster on an
// H200: benchmarks/gpu/RESULTS.md, "Model") only where its (layers + 1) x B x NH x T x T
// float scores fit in a quarter of the GPU's free memory.
#include <gtest/gtest.h>

#include <cstddef>

#include "worker/model/cuda/gpt_cuda.h"

namespace diloco::model::cuda {
namespace {

constexpr size_t kGiB = size_t(1) << 30;

// GPT-2 124M at batch 8 x 1024: 13 x 8 x 12 x 1024 x 1024 floats = 4.875 GiB of scores.
GpuShape Gpt2Small(GpuAttention a = GpuAttention::kAuto) {
  return {50257, 1024, 12, 12, 768, 8, 1024, a};
}

TEST(AttentionChoiceTest, AutoIsTheTrainersDefault) {
  GpuShape s{256, 64, 2, 4, 64, 4, 64};
  EXPECT_EQ(s.attention, GpuAttention::kAuto);
}

TEST(AttentionChoiceTest, AutoMaterializesWhereTheScoresFitAQuarterOfFreeMemory) {
  const double scores = 13.0 * 8 * 12 * 1024 * 1024 * 4;
  EXPECT_DOUBLE_EQ(scores / kGiB, 4.875);
  // An H200 (about 139 GiB free), and a GPU whose quarter holds the scores exactly.
  EXPECT_EQ(ChooseAttention(Gpt2Small(), 139 * kGiB), GpuAttention::kMaterialized);
  EXPECT_EQ(ChooseAttention(Gpt2Small(), size_t(scores) * 4), GpuAttention::kMaterialized);
  // A byte less, and a 16 GiB card: streaming.
  EXPECT_EQ(ChooseAttention(Gpt2Small(), size_t(scores) * 4 - 4), GpuAttention::kStreaming);
  EXPECT_EQ(ChooseAttention(Gpt2Small(), 16 * kGiB), GpuAttention::kStreaming);
}

TEST(AttentionChoiceTest, ScoresGrowWithTheSquareOfTheSequence) {
  GpuShape s = Gpt2Small();
  s.seq_len = 4096;  // 16x the scores of T = 1024: 78 GiB, over a quarter of an H200
  EXPECT_EQ(ChooseAttention(s, 139 * kGiB), GpuAttention::kStreaming);
  s.seq_len = 2048;  // 19.5 GiB: under
  EXPECT_EQ(ChooseAttention(s, 139 * kGiB), GpuAttention::kMaterialized);
}

TEST(AttentionChoiceTest, AnExplicitChoiceIsKeptWhateverTheMemory) {
  EXPECT_EQ(ChooseAttention(Gpt2Small(GpuAttention::kStreaming), 139 * kGiB),
            GpuAttention::kStreaming);
  EXPECT_EQ(ChooseAttention(Gpt2Small(GpuAttention::kMaterialized), 1 * kGiB),
            GpuAttention::kMaterialized);
  EXPECT_STREQ(AttentionName(GpuAttention::kAuto), "auto");
  EXPECT_STREQ(AttentionName(GpuAttention::kStreaming), "streaming");
  EXPECT_STREQ(AttentionName(GpuAttention::kMaterialized), "materialized");
}

}  // namespace
}  // namespace diloco::model::cuda
