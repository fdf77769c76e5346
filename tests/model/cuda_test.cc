// The CUDA model against the CPU reference (Gpt<float>) on random inputs and parameters (two
// sets of sizes), the CUDA trainer's optimizer against the CPU trainer's, and the CUDA trainer
// end to end. Skips without a usable GPU (any CUDA runtime error counts as none).
// Tolerances: cuBLAS runs in TF32 (10-bit mantissa), so the loss must agree to 2e-3 relative,
// logits to 2e-2 of their largest magnitude, and the gradient vector to 3e-2 relative L2 error.
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "worker/model/cpu_trainer.h"
#include "worker/model/cuda/cublas_loader.h"
#include "worker/model/cuda/cuda_trainer.h"
#include "worker/model/gpt.h"
#include "worker/model/presets.h"
#ifdef DILOCO_HAVE_NCCL
#include "worker/model/cuda/nccl_loader.h"
#endif

namespace diloco::model {
namespace {

#define SKIP_WITHOUT_GPU() \
  if (CudaDeviceCount() < 1) GTEST_SKIP() << "no CUDA GPU"

// cuBLAS is dlopen'ed on the first CUDA trainer (worker/model/cuda/cublas_loader.h): every entry
// point the GPT calls must resolve from the toolkit's library. Needs the library, not a GPU; on a
// machine with neither (the GPU run's rehearsal hides the toolkit) there is nothing to check.
TEST(CublasLoader, ResolvesEveryEntryPoint) {
  std::string error;
  const cuda::CublasApi* api = cuda::LoadCublas(&error);
  if (api == nullptr && CudaDeviceCount() < 1) GTEST_SKIP() << "no GPU and " << error;
  ASSERT_NE(api, nullptr) << error;
  EXPECT_NE(api->create, nullptr);
  EXPECT_NE(api->destroy, nullptr);
  EXPECT_NE(api->set_stream, nullptr);
  EXPECT_NE(api->set_math_mode, nullptr);
  EXPECT_NE(api->sgemm, nullptr);
  EXPECT_NE(api->sgemm_strided_batched, nullptr);
  EXPECT_EQ(cuda::LoadCublas(nullptr), api) << "loaded once";
}

#ifdef DILOCO_HAVE_NCCL
// NCCL likewise, for --gpus > 1 (worker/model/cuda/nccl_loader.h).
TEST(NcclLoader, ResolvesEveryEntryPoint) {
  std::string error;
  const cuda::NcclApi* api = cuda::LoadNccl(&error);
  if (api == nullptr && CudaDeviceCount() < 2) GTEST_SKIP() << "fewer than 2 GPUs and " << error;
  ASSERT_NE(api, nullptr) << error;
  EXPECT_NE(api->comm_init_all, nullptr);
  EXPECT_NE(api->comm_destroy, nullptr);
  EXPECT_NE(api->group_start, nullptr);
  EXPECT_NE(api->group_end, nullptr);
  EXPECT_NE(api->all_reduce, nullptr);
  EXPECT_NE(api->error_string, nullptr);
  EXPECT_STREQ(api->error_string(ncclSuccess), "no error");
  EXPECT_EQ(cuda::LoadNccl(nullptr), api) << "loaded once";
}
#endif

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

// Forward (loss, logits) and backward (every tensor's gradient) of one batch of B x T tokens.
void ExpectForwardBackwardMatchesCpu(const GptConfig& c, int B, int T,
                                     cuda::GpuAttention attention) {
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
  ASSERT_EQ(cuda::GptCuda::Create({c.vocab, c.context, c.layers, c.heads, c.width, B, T, attention},
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

class ModelCudaAttention : public ::testing::TestWithParam<cuda::GpuAttention> {};

TEST_P(ModelCudaAttention, ForwardBackwardMatchesCpu) {
  SKIP_WITHOUT_GPU();
  ExpectForwardBackwardMatchesCpu(
      {.vocab = 100, .context = 32, .layers = 2, .heads = 4, .width = 64}, 4, 32, GetParam());
}

// Sizes that make every loop of the kernels run more than once or stop mid-way: rows of V = 1000
// for the softmax and cross-entropy lanes, T = 100 of a context of 128 (sequences shorter than
// the context), C = 96 over 3 heads (head width 32) for LayerNorm backward's block cap and
// multi-row loop, and B = 3. Streaming attention: T = 100 ends mid-tile (64-row tiles).
TEST_P(ModelCudaAttention, ForwardBackwardMatchesCpuAtUnevenSizes) {
  SKIP_WITHOUT_GPU();
  ExpectForwardBackwardMatchesCpu(
      {.vocab = 1000, .context = 128, .layers = 2, .heads = 3, .width = 96}, 3, 100, GetParam());
}

// Head sizes the streaming kernels pad: 24 (compiled for 32), 40 (for 64) and 80 (for 128, where
// tiles are 32 rows), with sequence lengths that end mid-tile, and T = 1.
TEST_P(ModelCudaAttention, ForwardBackwardMatchesCpuAtPaddedHeadSizes) {
  SKIP_WITHOUT_GPU();
  ExpectForwardBackwardMatchesCpu(
      {.vocab = 300, .context = 80, .layers = 1, .heads = 3, .width = 72}, 2, 77, GetParam());
  ExpectForwardBackwardMatchesCpu(
      {.vocab = 300, .context = 80, .layers = 1, .heads = 2, .width = 80}, 2, 65, GetParam());
  ExpectForwardBackwardMatchesCpu(
      {.vocab = 300, .context = 80, .layers = 1, .heads = 2, .width = 160}, 2, 45, GetParam());
  ExpectForwardBackwardMatchesCpu(
      {.vocab = 300, .context = 80, .layers = 1, .heads = 2, .width = 64}, 3, 1, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Attention, ModelCudaAttention,
                         ::testing::Values(cuda::GpuAttention::kStreaming,
                                           cuda::GpuAttention::kMaterialized),
                         [](const auto& info) {
                           return info.param == cuda::GpuAttention::kStreaming ? "Streaming"
                                                                               : "Materialized";
                         });

// The GPU's AdamW and device-side gradient clipping against the CPU trainer: the same options,
// init and batches, three steps, a clip far below the gradient norm so it binds on every step,
// and an epsilon far above the clipped gradients' elements, so the update is nearly linear in
// the clipped gradient (with a small epsilon, Adam's update does not depend on the gradient's
// scale and a wrong clip would not show).
TEST(ModelCuda, AdamWAndClippingMatchTheCpuTrainer) {
  SKIP_WITHOUT_GPU();
  TrainerOptions o = CiTrainingOptions();
  o.grad_clip = 0.05f;
  o.adamw.eps = 1e-2f;
  o.warmup_steps = 0;
  auto cpu = MakeCpuTrainer(o);
  ASSERT_TRUE(cpu.ok()) << cpu.status();
  auto gpu = MakeCudaTrainer(o);
  ASSERT_TRUE(gpu.ok()) << gpu.status();
  const std::vector<float> init((*cpu)->params().begin(), (*cpu)->params().end());
  {
    std::span<const float> g = (*gpu)->params();
    ASSERT_EQ(std::vector<float>(g.begin(), g.end()), init) << "not the same initial model";
  }
  for (int s = 0; s < 3; ++s) {
    const float cl = (*cpu)->Step(), gl = (*gpu)->Step();
    ASSERT_TRUE(std::isfinite(gl)) << (*gpu)->error();
    EXPECT_NEAR(gl, cl, 2e-3 * cl) << "step " << s;
  }
  std::span<const float> pc = (*cpu)->params(), pg = (*gpu)->params();
  double num = 0, den = 0;
  for (size_t i = 0; i < init.size(); ++i) {
    const double uc = pc[i] - init[i], ug = pg[i] - init[i];
    num += (uc - ug) * (uc - ug);
    den += uc * uc;
  }
  ASSERT_GT(den, 0) << "the CPU trainer did not move";
  EXPECT_LT(std::sqrt(num / den), 5e-2) << "relative L2 error of the three steps' update";
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

// ParamRange copies only the range asked for and uploads only what was handed out: an edit made
// through one range survives a second request that covers it (no download over it), reaches
// the device before the next eval, and leaves every other parameter as the device had it; after
// a step the range is fetched afresh (the device moved on).
TEST(ModelCuda, ParamRangeMovesOnlyItsRangeBothWays) {
  SKIP_WITHOUT_GPU();
  TrainerOptions o = CiTrainingOptions();
  auto t = MakeCudaTrainer(o);
  ASSERT_TRUE(t.ok()) << t.status();
  CudaTrainer& tr = **t;
  for (int s = 0; s < 3; ++s) ASSERT_TRUE(std::isfinite(tr.Step())) << tr.error();
  const std::span<float> whole = tr.params();
  const std::vector<float> device(whole.begin(), whole.end());
  tr.EvalLoss();  // uploads the (unedited) whole mirror: the device is unchanged
  std::span<float> r = tr.ParamRange(100, 50);
  ASSERT_EQ(r.size(), 50u);
  EXPECT_TRUE(std::equal(r.begin(), r.end(), device.begin() + 100));
  std::fill(r.begin(), r.end(), 0.5f);
  std::span<float> wider = tr.ParamRange(90, 80);  // covers the edit: fetches 90-99, 150-169
  EXPECT_EQ(wider[10], 0.5f);
  EXPECT_EQ(wider[0], device[90]);
  EXPECT_EQ(wider[79], device[169]);
  tr.EvalLoss();                             // uploads 90-169
  ASSERT_TRUE(tr.CopyParamsToHost().ok());   // the device's values, whole
  const std::span<float> now = tr.params();  // not re-fetched: CopyParamsToHost filled it
  for (size_t i = 0; i < device.size(); ++i)
    ASSERT_EQ(now[i], i >= 100 && i < 150 ? 0.5f : device[i]) << i;
  ASSERT_TRUE(std::isfinite(tr.Step())) << tr.error();
  std::span<float> after = tr.ParamRange(100, 50);
  EXPECT_NE(after[0], 0.5f) << "after a step the range is fetched from the device again";
  ASSERT_TRUE(tr.error().ok()) << tr.error();
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
