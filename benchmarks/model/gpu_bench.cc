// GPU throughput of the CUDA model (TF32 cuBLAS, fp32 storage): tokens/s and achieved TFLOP/s for
// GPT-2 124M and GPT-2 350M at batch 8 x 1024 on one GPU, full training steps (forward,
// backward, AdamW) on random tokens. Prints one "RESULT name tokens_per_s tflops" line per
// config for gpu_check.sh. Exits 0 with a note when there is no GPU.
//   model_gpu_bench [batch=8] [steps=10]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "worker/model/cuda/cuda_trainer.h"

using namespace diloco;
using namespace diloco::model;

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
    std::printf("no CUDA GPU: nothing to measure\n");
    return 0;
  }
  for (const char* preset : {"gpt2-124m", "gpt2-350m"}) {
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
        {c.vocab, c.context, c.layers, c.heads, c.width, batch, c.context}, gl, 1, &g);
    if (!e.empty()) {
      std::fprintf(stderr, "%s: %s\n", preset, e.c_str());
      return 1;
    }
    std::vector<float> p(layout->total);
    InitGpt2(*layout, 1, p);
    g->Upload(p.data());
    const size_t N = size_t(batch) * c.context;
    std::vector<int32_t> in(N), tg(N);
    std::mt19937 rng(1);
    for (size_t i = 0; i < N; ++i) {
      in[i] = rng() % c.vocab;
      tg[i] = rng() % c.vocab;
    }
    const cuda::GpuAdamW a{3e-4f, 0.9f, 0.95f, 1e-8f, 0.1f};
    float loss = 0;
    for (int s = 1; s <= 3; ++s) e = g->TrainStep(in.data(), tg.data(), a, s, 1.0f, &loss);
    if (!e.empty()) {
      std::fprintf(stderr, "%s: %s\n", preset, e.c_str());
      return 1;
    }
    const auto t0 = std::chrono::steady_clock::now();
    for (int s = 4; s < 4 + steps; ++s) g->TrainStep(in.data(), tg.data(), a, s, 1.0f, &loss);
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const double tokens = double(N) * steps;
    const double flops_per_token = 6.0 * layout->total + 12.0 * c.layers * c.context * c.width;
    std::printf("%s batch %d x %d: %.0f tokens/s, %.1f TFLOP/s (TF32), %.1f ms/step, loss %.3f\n",
                preset, batch, c.context, tokens / sec, tokens * flops_per_token / sec / 1e12,
                1e3 * sec / steps, loss);
    std::printf("RESULT %s %.1f %.3f\n", preset, tokens / sec,
                tokens * flops_per_token / sec / 1e12);
    std::fflush(stdout);
  }
  return 0;
}
