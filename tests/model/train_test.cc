// Training on the synthetic Markov mixture brings the held-out loss within 10% of the exact
// entropy of the held-out tokens (the loss of an ideal model that knows the active chain).
#include <chrono>
#include <cmath>
#include <cstdio>

#include "gtest/gtest.h"
#include "worker/data/batcher.h"
#include "worker/data/source.h"
#include "worker/model/cpu_trainer.h"
#include "worker/model/evaluate.h"
#include "worker/model/presets.h"

namespace diloco::model {
namespace {

TEST(ModelTrain, SyntheticHeldoutLossApproachesEntropy) {
  TrainerOptions o = CiTrainingOptions();
  absl::StatusOr<double> oracle = HeldoutOracle(o);
  ASSERT_TRUE(oracle.ok()) << oracle.status();
  absl::StatusOr<std::unique_ptr<Trainer>> t = MakeCpuTrainer(o);
  ASSERT_TRUE(t.ok()) << t.status();
  const float initial = (*t)->EvalLoss();
  EXPECT_GT(initial, 0.9 * std::log(256.0));
  const auto start = std::chrono::steady_clock::now();
  float eval = initial;
  const int kSteps = o.decay_steps;
  for (int s = 1; s <= kSteps; ++s) {
    const float loss = (*t)->Step();
    if (s % 100 == 0) {
      eval = (*t)->EvalLoss();
      std::printf("step %d train %.4f held-out %.4f oracle %.4f (%.1f s)\n", s, loss, eval, *oracle,
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    }
  }
  eval = (*t)->EvalLoss();
  EXPECT_LT(eval, 1.10 * *oracle) << "held-out " << eval << " vs entropy " << *oracle;
  EXPECT_GT(eval, 0.97 * *oracle) << "below the entropy bound: the oracle or the loss is wrong";
}

}  // namespace
}  // namespace diloco::model
