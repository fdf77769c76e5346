// The CUDA model against the CPU reference (Gpt<float>) on random inputs and parameters, and the
// CUDA trainer end to end. Skips without a usable GPU (any CUDA runtime error counts as none).
// Tolerances: cuBLAS runs in TF32 (10-bit mantissa), so the loss must agree to 2e-3 relative,
// logits to 2e-2 of their largest magnitude, and the gradient vector to 3e-2 relative L2 error.
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "worker/model/cuda/cublas_loader.h"
#include "worker/model/cuda/cuda_trainer.h"
#include "worker/model/gpt.h"
#include "worker/model/presets.h"

namespace diloco::model {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (CudaDeviceCount() < 1) GTEST_SKIP() << "no CUDA GPU"

// cuBLAS is dlopen'ed on the first CUDA trainer (worker/model/cuda/cublas_loader.h): every entry
// point the GPT calls must resolve from the toolkit's library. Needs the library, not a GPU.
TEST(CublasLoader, ResolvesEveryEntryPoint) {
  std::string error;
  const cuda::CublasApi* api = cuda::LoadCublas(&error);
  ASSERT_NE(api, nullptr) << error;
  EXPECT_NE(api->create, nullptr);
  EXPECT_NE(api->destroy, nullptr);
  EXPECT_NE(api->set_stream, nullptr);
  EXPECT_NE(api->set_math_mode, nullptr);
  EXPECT_NE(api->sgemm, nullptr);
  EXPECT_NE(api->sgemm_strided_batched, nullptr);
  EXPECT_EQ(cuda::LoadCublas(nullptr), api) << "loaded once";
}

cuda::GpuLayout ToGpu(const ParamLayout& l) {
  cuda::GpuLayout g;
  g.wte = l.wte;
  g.wpe = l.wpe;
  g.lnfw = l.lnfw;
  g.lnfb = l.lnfb;
  g.total = l.total;
  g.layers = l.layers;
  for (const TensorSpec& s : l.manifest.tensors())
    g.tensors.push_back({s.offset, s.numel(), IsDecayed(s)});
  return g;
}

TEST(ModelCuda, ForwardBackwardMatchesCpu) {
  SKIP_WITHOUT_GPU();
  const GptConfig c{.vocab = 100, .context = 32, .layers = 2, .heads = 4, .width = 64};
  const int B = 4, T = 32;
  auto cpu = Gpt<float>::Create(c, B, T);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  std::mt19937_64 rng(11);
  InitGpt2((*cpu)->layout(), 5, (*cpu)->params());
  // Perturb LayerNorm gains/biases too so they are not trivially 1/0.
  std::normal_distribution<float> nd(0.f, 0.05f);
  for (float& p : (*cpu)->params()) p += nd(rng);
  std::vector<int32_t> in(B * T), tg(B * T);
  for (int i = 0; i < B * T; ++i) {
    in[i] = static_cast<int32_t>(rng() % c.vocab);
    tg[i] = static_cast<int32_t>(rng() % c.vocab);
  }
  const double cpu_loss = (*cpu)->Forward(in.data(), tg.data());
  (*cpu)->Backward();

  const ParamLayout& layout = (*cpu)->layout();
  std::unique_ptr<cuda::GptCuda> gpu;
  ASSERT_EQ(cuda::GptCuda::Create({c.vocab, c.context, c.layers, c.heads, c.width, B, T},
                                  ToGpu(layout), 1, &gpu),
            "");
  ASSERT_EQ(gpu->Upload((*cpu)->params().data()), "");
  float gpu_loss = 0;
  std::vector<float> logits(size_t(B) * T * c.vocab), grads(layout.total);
  ASSERT_EQ(gpu->ForwardBackward(in.data(), tg.data(), &gpu_loss, logits.data(), grads.data()), "");
  EXPECT_NEAR(gpu_loss, cpu_loss, 2e-3 * cpu_loss);
  float max_logit = 0, max_diff = 0;
  for (size_t i = 0; i < logits.size(); ++i) {
    max_logit = std::max(max_logit, std::abs((*cpu)->logits()[i]));
    max_diff = std::max(max_diff, std::abs(logits[i] - (*cpu)->logits()[i]));
  }
  EXPECT_LT(max_diff, 2e-2 * max_logit);
  for (const TensorSpec& t : layout.manifest.tensors()) {
    double num = 0, den = 0;
    for (uint64_t i = t.offset; i < t.offset + t.numel(); ++i) {
      const double d = grads[i] - (*cpu)->grads()[i];
      num += d * d;
      den += double((*cpu)->grads()[i]) * (*cpu)->grads()[i];
    }
    EXPECT_LT(std::sqrt(num / std::max(den, 1e-30)), 3e-2) << t.name;
  }
}

TEST(ModelCuda, TrainerLearnsAndParamsRoundTrip) {
  SKIP_WITHOUT_GPU();
  TrainerOptions o = CiTrainingOptions();
  auto t = MakeCudaTrainer(o);
  ASSERT_TRUE(t.ok()) << t.status();
  CudaTrainer& tr = **t;
  const float initial = tr.EvalLoss();
  for (int s = 0; s < 300; ++s) ASSERT_TRUE(std::isfinite(tr.Step())) << tr.error();
  const float after = tr.EvalLoss();
  EXPECT_LT(after, 0.6f * initial);
  // params() mirrors the device; an edit through it reaches the device before the next eval.
  std::span<float> p = tr.params();
  std::vector<float> saved(p.begin(), p.end());
  for (float& x : p) x = 0.f;
  const float zero_loss = tr.EvalLoss();  // all-zero model: uniform predictions
  EXPECT_NEAR(zero_loss, std::log(float(o.model.vocab)), 1e-3);
  std::span<float> q = tr.params();
  std::copy(saved.begin(), saved.end(), q.begin());
  EXPECT_NEAR(tr.EvalLoss(), after, 1e-4);
}

TEST(ModelCuda, TwoGpusDataParallel) {
  SKIP_WITHOUT_GPU();
  if (CudaDeviceCount() < 2) GTEST_SKIP() << "needs 2 GPUs";
  TrainerOptions o = CiTrainingOptions();
  o.gpus = 2;
  auto t = MakeCudaTrainer(o);
  ASSERT_TRUE(t.ok()) << t.status();
  const float initial = (*t)->EvalLoss();
  for (int s = 0; s < 100; ++s) ASSERT_TRUE(std::isfinite((*t)->Step()));
  EXPECT_LT((*t)->EvalLoss(), initial);
  EXPECT_EQ((*t)->tokens_per_step(), 2u * o.batch_size * o.seq_len);
}

}  // namespace
}  // namespace diloco::model
