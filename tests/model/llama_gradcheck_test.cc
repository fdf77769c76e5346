// The Llama model (worker/model/llama/llama_model.h) in double precision against central finite
// differences: every parameter of a small model with grouped-query attention (4 query heads over
// 2 kv heads), two layers and random (not unit) norm weights, so that RMSNorm, the rotary
// embedding, the head grouping, SwiGLU and the untied readout all carry gradient.
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "worker/model/llama/llama_config.h"
#include "worker/model/llama/llama_model.h"

namespace diloco::model {
namespace {

LlamaConfig Small(int kv_heads) {
  return LlamaConfig{.vocab = 11,
                     .context = 6,
                     .layers = 2,
                     .heads = 4,
                     .kv_heads = kv_heads,
                     .width = 16,
                     .ffn = 12};
}

void CheckModel(const LlamaConfig& c, uint64_t seed) {
  const int B = 2, T = 5;
  auto m = LlamaModel<double>::Create(c, B, T);
  ASSERT_TRUE(m.ok()) << m.status();
  LlamaModel<double>& model = **m;
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> d(0.0, 0.3);
  for (double& p : model.params()) p = d(rng);
  std::vector<int32_t> in(B * T), tg(B * T);
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = int32_t(rng() % c.vocab);
    tg[i] = int32_t(rng() % c.vocab);
  }
  model.Forward(in.data(), tg.data());
  model.Backward();
  const std::vector<double> grad(model.grads().begin(), model.grads().end());
  std::span<double> x = model.params();
  double worst = 0;
  for (const TensorSpec& t : model.manifest().tensors()) {
    for (uint64_t j = 0; j < t.numel(); ++j) {
      const size_t i = t.offset + j;
      const double h = 1e-5, x0 = x[i];
      x[i] = x0 + h;
      const double fp = model.Forward(in.data(), tg.data());
      x[i] = x0 - h;
      const double fm = model.Forward(in.data(), tg.data());
      x[i] = x0;
      const double num = (fp - fm) / (2 * h);
      const double err =
          std::abs(num - grad[i]) / std::max(1e-4, std::abs(num) + std::abs(grad[i]));
      worst = std::max(worst, err);
      ASSERT_LT(err, 1e-6) << t.name << "[" << j << "]: numeric " << num << " analytic " << grad[i];
    }
  }
  ::testing::Test::RecordProperty("worst", std::to_string(worst));
}

TEST(LlamaGradcheck, EveryParameterWithGroupedQueryAttention) { CheckModel(Small(2), 1); }

TEST(LlamaGradcheck, EveryParameterWithOneKvHeadPerQueryHead) { CheckModel(Small(4), 2); }

TEST(LlamaGradcheck, CreateRefusesASequenceLongerThanTheContext) {
  EXPECT_FALSE(LlamaModel<double>::Create(Small(2), 1, 7).ok());
  EXPECT_FALSE(LlamaModel<double>::Create(Small(2), 0, 4).ok());
}

}  // namespace
}  // namespace diloco::model
