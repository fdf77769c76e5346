// The synthetic learner (worker/model/synthetic_trainer.h): its window of moved parameters tiles
// the model once per H steps, its run is a function of its seed, each step waits the step time
// through the injected sleep (so this test never sleeps), and moves stay within the rate; it
// takes any model's manifest.
#include "worker/model/synthetic_trainer.h"

#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "worker/model/gpt/gpt_config.h"

namespace diloco::model {
namespace {

SyntheticOptions Options(uint32_t h, uint64_t seed, std::vector<absl::Duration>* waits) {
  SyntheticOptions o;
  o.manifest = *GptManifest(GptConfig{});  // tiny
  o.inner_steps = h;
  o.seed = seed;
  o.step_time = absl::Milliseconds(250);
  o.sleep = [waits](absl::Duration d) { waits->push_back(d); };
  return o;
}

std::unique_ptr<Trainer> Make(const SyntheticOptions& o) {
  auto t = MakeSyntheticTrainer(o);
  EXPECT_TRUE(t.ok()) << t.status();
  return t.ok() ? *std::move(t) : nullptr;
}

TEST(SyntheticTrainerTest, HasTheModelsManifestAndNoEvaluation) {
  std::vector<absl::Duration> waits;
  auto t = Make(Options(5, 1, &waits));
  ASSERT_NE(t, nullptr);
  auto m = GptManifest(GptConfig{});
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(t->manifest().fingerprint(), m->fingerprint());
  EXPECT_EQ(t->params().size(), m->total_elements());
  EXPECT_TRUE(std::isnan(t->EvalLoss()));
}

// Any model's tensors, not only the GPT's: a Llama-like manifest, every parameter moved once per
// H steps.
TEST(SyntheticTrainerTest, TakesAnyManifest) {
  std::vector<absl::Duration> waits;
  SyntheticOptions o = Options(4, 1, &waits);
  o.manifest = *Manifest::Create({{"model.embed_tokens.weight", {32, 8}},
                                  {"model.layers.0.mlp.up_proj.weight", {24, 8}},
                                  {"model.norm.weight", {8}}});
  auto t = Make(o);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->manifest().fingerprint(), o.manifest.fingerprint());
  ASSERT_EQ(t->params().size(), 32u * 8 + 24 * 8 + 8);
  const std::vector<float> before(t->params().begin(), t->params().end());
  for (int s = 0; s < 4; ++s) t->Step();
  for (size_t i = 0; i < before.size(); ++i) EXPECT_NE(t->params()[i], before[i]) << i;
}

TEST(SyntheticTrainerTest, EveryParameterMovesExactlyOncePerHSteps) {
  constexpr uint32_t kH = 7;  // does not divide the tiny model's size
  std::vector<absl::Duration> waits;
  auto t = Make(Options(kH, 3, &waits));
  ASSERT_NE(t, nullptr);
  const size_t n = t->params().size();
  ASSERT_NE(n % kH, 0u);
  for (int round = 0; round < 2; ++round) {
    std::vector<int> moves(n, 0);
    for (uint32_t s = 0; s < kH; ++s) {
      const std::vector<float> before(t->params().begin(), t->params().end());
      const float loss = t->Step();
      EXPECT_TRUE(std::isfinite(loss) && loss > 0);
      size_t moved = 0;
      for (size_t i = 0; i < n; ++i) {
        if (t->params()[i] == before[i]) continue;
        ++moves[i];
        ++moved;
        EXPECT_LE(std::abs(t->params()[i] - before[i]), 1.0001e-3f) << i;  // the default rate
      }
      EXPECT_GE(moved, n / kH - n / kH / 100) << "step " << s;  // about n/H, nearly all nonzero
      EXPECT_LE(moved, n / kH + 1) << "step " << s;
    }
    for (size_t i = 0; i < n; ++i) ASSERT_LE(moves[i], 1) << "moved twice: " << i;
    size_t never = 0;
    for (int c : moves) never += c == 0;
    EXPECT_LT(never, n / 1000) << "round " << round;  // only where the table's value is 0
  }
}

TEST(SyntheticTrainerTest, TheSameSeedGivesTheSameRunAnotherSeedAnother) {
  std::vector<absl::Duration> waits;
  auto a = Make(Options(4, 11, &waits)), b = Make(Options(4, 11, &waits));
  auto c = Make(Options(4, 12, &waits));
  ASSERT_TRUE(a && b && c);
  for (int s = 0; s < 6; ++s) {
    EXPECT_EQ(a->Step(), b->Step());
    c->Step();
  }
  const std::vector<float> pa(a->params().begin(), a->params().end());
  EXPECT_EQ(pa, std::vector<float>(b->params().begin(), b->params().end()));
  EXPECT_NE(pa, std::vector<float>(c->params().begin(), c->params().end()));
}

TEST(SyntheticTrainerTest, EachStepWaitsTheStepTime) {
  std::vector<absl::Duration> waits;
  auto t = Make(Options(3, 1, &waits));
  ASSERT_NE(t, nullptr);
  EXPECT_TRUE(waits.empty());
  for (int s = 0; s < 4; ++s) t->Step();
  EXPECT_EQ(waits, std::vector<absl::Duration>(4, absl::Milliseconds(250)));
}

TEST(SyntheticTrainerTest, TheLearningRateBoundsEachMove) {
  std::vector<absl::Duration> waits;
  auto t = Make(Options(1, 5, &waits));  // H = 1: every parameter moves on every step
  ASSERT_NE(t, nullptr);
  t->SetLearningRate(0.25f);
  const std::vector<float> before(t->params().begin(), t->params().end());
  t->Step();
  float largest = 0;
  for (size_t i = 0; i < before.size(); ++i)
    largest = std::max(largest, std::abs(t->params()[i] - before[i]));
  EXPECT_LE(largest, 0.25f * 1.0001f);
  EXPECT_GT(largest, 0.2f);  // the table spans [-1, 1)
}

TEST(SyntheticTrainerTest, RefusesBadOptions) {
  std::vector<absl::Duration> waits;
  SyntheticOptions o = Options(0, 1, &waits);
  EXPECT_FALSE(MakeSyntheticTrainer(o).ok());
  o = Options(4, 1, &waits);
  o.step_time = absl::Milliseconds(-1);
  EXPECT_FALSE(MakeSyntheticTrainer(o).ok());
  o = Options(4, 1, &waits);
  o.manifest = Manifest();  // no parameters
  EXPECT_FALSE(MakeSyntheticTrainer(o).ok());
}

}  // namespace
}  // namespace diloco::model
