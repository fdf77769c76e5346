// GPU throughput of the CUDA model (TF32 cuBLAS, fp32 storage): tokens/s and achieved TFLOP/s for
// GPT-2 124M and GPT-2 350M at batch 8 x 1024 on one GPU, full training steps (forward,
// backward, AdamW) on random tokens, with streaming attention (RESULT name = the preset) and
// with materialized attention (name-materialized; what the trainer's kAuto takes where it fits).
// Prints one "RESULT name tokens_per_s tflops" line per config for gpu_check.sh. Fails (exit 1)
// without a GPU, and unless each config's loss is finite, within 1 of ln(V) at the first step (what
// GPT-2 init gives on random tokens) and lower after the timed steps than at the first (the same
// batch every step: training must fit it): a fast step that computes garbage is not a result.
//   model_gpu_bench [batch=8] [steps=10]
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "worker/model/cuda/cuda_trainer.h"

using namespace diloco;
using namespace diloco::model;

// GPT-2-like parameters without InitGpt2's per-value Box-Muller, which takes ~20 s on one core for
// both presets, on the device machine's clock. Speed does not depend on the values; the scales
// match InitGpt2 (N(0, 0.02), residual projections 0.02/sqrt(2L), biases 0, LayerNorm gains 1) so
// the loss stays near ln(V). Matrices cycle through a table of normal samples of prime length, so
// rows closer than 65521 rows apart (every row of wte) never coincide.
std::vector<float> FastInit(const ParamLayout& layout) {
  constexpr size_t kTable = 65521;
  std::vector<float> table(kTable);
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.f, 1.f);
  for (float& x : table) x = normal(rng);
  std::vector<float> p(layout.total);
  const float resid = 0.02f / std::sqrt(2.f * layout.config.layers);
  for (const TensorSpec& t : layout.manifest.tensors()) {
    float* w = p.data() + t.offset;
    if (t.shape.size() == 1) {
      const bool gain = t.name.find("ln_") != std::string::npos && t.name.ends_with(".weight");
      std::fill(w, w + t.numel(), gain ? 1.f : 0.f);
      continue;
    }
    const float sigma = t.name.ends_with("c_proj.weight") ? resid : 0.02f;
    for (uint64_t i = 0; i < t.numel(); ++i) w[i] = sigma * table[(t.offset + i) % kTable];
  }
  return p;
}

int main(int argc, char** argv) {
  int batch = 8, steps = 10;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("batch=", 0) == 0)
      batch = std::atoi(a.c_str() + 6);
    else if (a.rfind("steps=", 0) == 0)
      steps = std::atoi(a.c_str() + 6);
  }
  if (CudaDeviceCount() < 1) {
    std::printf("no CUDA GPU: nothing measured\n");
    return 1;
  }
  for (const char* preset : {"gpt2-124m", "gpt2-350m"})
    for (const cuda::GpuAttention attention :
         {cuda::GpuAttention::kStreaming, cuda::GpuAttention::kMaterialized}) {
      const std::string name = std::string(preset) +
                               (attention == cuda::GpuAttention::kStreaming ? "" : "-materialized");
      GptConfig c = *ParseGptConfig(preset);
      auto layout = MakeParamLayout(c);
      cuda::GpuLayout gl;
      gl.wte = layout->wte;
      gl.wpe = layout->wpe;
      gl.lnfw = layout->lnfw;
      gl.lnfb = layout->lnfb;
      gl.total = layout->total;
      gl.layers = layout->layers;
      for (const TensorSpec& s : layout->manifest.tensors())
        gl.tensors.push_back({s.offset, s.numel(), IsDecayed(s)});
      std::unique_ptr<cuda::GptCuda> g;
      std::string e = cuda::GptCuda::Create(
          {c.vocab, c.context, c.layers, c.heads, c.width, batch, c.context, attention}, gl, 1, &g);
      if (!e.empty()) {
        std::fprintf(stderr, "%s: %s\n", name.c_str(), e.c_str());
        return 1;
      }
      std::vector<float> p = FastInit(*layout);
      if (std::string ue = g->Upload(p.data()); !ue.empty()) {
        std::fprintf(stderr, "%s: %s\n", name.c_str(), ue.c_str());
        return 1;
      }
      const size_t N = size_t(batch) * c.context;
      std::vector<int32_t> in(N), tg(N);
      std::mt19937 rng(1);
      for (size_t i = 0; i < N; ++i) {
        in[i] = rng() % c.vocab;
        tg[i] = rng() % c.vocab;
      }
      const cuda::GpuAdamW a{3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f};
      float loss = 0, first_loss = 0;
      // Warm-up (cuBLAS heuristics, first-touch costs), then the timed steps. Every step ends with
      // a stream synchronisation (TrainStep returns the loss), so the wall clock covers the work.
      for (int s = 1; s <= 3 && e.empty(); ++s) {
        e = g->TrainStep(in.data(), tg.data(), a, s, 1.0f, &loss);
        if (s == 1) first_loss = loss;
      }
      const auto t0 = std::chrono::steady_clock::now();
      for (int s = 4; s < 4 + steps && e.empty(); ++s)
        e = g->TrainStep(in.data(), tg.data(), a, s, 1.0f, &loss);
      const double sec =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      // A failed step would make the timing meaningless: report it instead of a rate.
      if (!e.empty()) {
        std::fprintf(stderr, "%s: %s\n", name.c_str(), e.c_str());
        return 1;
      }
      const float ln_v = std::log(static_cast<float>(c.vocab));
      if (!std::isfinite(first_loss) || !std::isfinite(loss) ||
          std::fabs(first_loss - ln_v) > 1.0f || !(loss < first_loss)) {
        std::fprintf(stderr,
                     "%s: wrong loss: %.4f at the first step (ln V = %.4f), %.4f at the last\n",
                     name.c_str(), first_loss, ln_v, loss);
        return 1;
      }
      const double tokens = double(N) * steps;
      const double flops_per_token = 6.0 * layout->total + 12.0 * c.layers * c.context * c.width;
      std::printf(
          "%s batch %d x %d: %.0f tokens/s, %.1f TFLOP/s (TF32), %.1f ms/step, loss %.3f -> %.3f\n",
          name.c_str(), batch, c.context, tokens / sec, tokens * flops_per_token / sec / 1e12,
          1e3 * sec / steps, first_loss, loss);
      std::printf("RESULT %s %.1f %.3f\n", name.c_str(), tokens / sec,
                  tokens * flops_per_token / sec / 1e12);
      std::fflush(stdout);
    }
  return 0;
}
