// The Llama family's CPU trainer (worker/model/llama/llama_trainer.h), reached as the worker
// reaches it: MakeCpuTrainer with TrainerOptions::llama. On the CI job's synthetic data it
// learns (held-out loss well down in 150 steps), its parameters are llama-tiny's manifest, the
// same seed gives the same run, and the CUDA trainer refuses it.
#include <cmath>
#include <vector>

#include "common/model_source.h"
#include "gtest/gtest.h"
#include "worker/model/cpu_trainer.h"
#include "worker/model/llama/llama_config.h"
#include "worker/model/presets.h"
#if defined(DILOCO_MODEL_HAVE_CUDA)
#include "worker/model/cuda/cuda_trainer.h"
#endif

namespace diloco::model {
namespace {

TrainerOptions LlamaOptions() {
  TrainerOptions o = CiTrainingOptions();
  o.llama = *ParseLlamaConfig("llama-tiny");
  o.model = GptConfig{.vocab = 1, .context = 1, .layers = 1, .heads = 1, .width = 1};
  o.batch_size = 4;
  o.seq_len = 32;
  o.decay_steps = 150;
  return o;
}

TEST(LlamaTrainerTest, LearnsTheSyntheticDataAndIsLlamaTinysManifest) {
  auto t = MakeCpuTrainer(LlamaOptions());
  ASSERT_TRUE(t.ok()) << t.status();
  Trainer& tr = **t;
  EXPECT_EQ(tr.manifest().fingerprint(), LoadModelSource("llama-tiny")->manifest.fingerprint());
  EXPECT_EQ(tr.tokens_per_step(), 4u * 32u);
  const float before = tr.EvalLoss();
  EXPECT_NEAR(before, std::log(256.0), 0.2);
  float loss = 0;
  for (int i = 0; i < 150; ++i) loss = tr.Step();
  EXPECT_TRUE(std::isfinite(loss));
  const float after = tr.EvalLoss();
  EXPECT_LT(after, 0.75f * before) << "before " << before << " after " << after;
  ASSERT_TRUE(tr.optimizer_state().has_value());
  EXPECT_EQ(tr.optimizer_state()->step, 150);
}

TEST(LlamaTrainerTest, TheSameSeedsGiveTheSameParameters) {
  auto a = MakeCpuTrainer(LlamaOptions());
  auto b = MakeCpuTrainer(LlamaOptions());
  ASSERT_TRUE(a.ok() && b.ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ((*a)->Step(), (*b)->Step());
  const std::span<float> pa = (*a)->params(), pb = (*b)->params();
  EXPECT_TRUE(std::equal(pa.begin(), pa.end(), pb.begin()));
}

TEST(LlamaTrainerTest, SeqLenBeyondTheLlamaContextIsRefused) {
  TrainerOptions o = LlamaOptions();
  o.seq_len = 65;
  auto t = MakeCpuTrainer(o);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("context 64"), std::string::npos) << t.status();
}

#if defined(DILOCO_MODEL_HAVE_CUDA)
TEST(LlamaTrainerTest, TheCudaTrainerRefusesTheLlamaFamily) {
  auto t = MakeCudaTrainer(LlamaOptions());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("Llama family has no CUDA kernels"), std::string::npos)
      << t.status();
}
#endif

}  // namespace
}  // namespace diloco::model
