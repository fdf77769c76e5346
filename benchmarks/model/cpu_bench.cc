// CPU throughput of the default job's model (DefaultJobOptions: L=4,H=4,C=128,T=128, batch 8)
// in tokens/s and achieved FLOP/s, against the ceiling measured in the same run: OpenBLAS sgemm
// GFLOP/s on 1024^3 products with the same thread count.
//   model_cpu_bench [threads=N] [steps=N]
#include <cblas.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "worker/model/cpu_trainer.h"
#include "worker/model/presets.h"

using namespace diloco;
using namespace diloco::model;
using Clock = std::chrono::steady_clock;

static double Seconds(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
}

int main(int argc, char** argv) {
  int threads = 2, steps = 20;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("threads=", 0) == 0)
      threads = std::atoi(a.c_str() + 8);
    else if (a.rfind("steps=", 0) == 0)
      steps = std::atoi(a.c_str() + 6);
  }
  SetCpuThreads(threads);
  // Ceiling: sgemm 1024^3.
  const int n = 1024;
  std::vector<float> A(n * n, 0.5f), B(n * n, 0.25f), C(n * n);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1, A.data(), n, B.data(), n, 0,
              C.data(), n);
  auto t0 = Clock::now();
  int reps = 0;
  while (Seconds(t0) < 2.0) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, n, 1, A.data(), n, B.data(), n, 0,
                C.data(), n);
    ++reps;
  }
  const double sgemm_gflops = 2.0 * n * n * n * reps / Seconds(t0) / 1e9;

  TrainerOptions o = DefaultJobOptions();
  o.threads = threads;
  auto t = MakeCpuTrainer(o);
  if (!t.ok()) {
    std::fprintf(stderr, "%s\n", t.status().ToString().c_str());
    return 1;
  }
  for (int i = 0; i < 3; ++i) (*t)->Step();
  t0 = Clock::now();
  for (int i = 0; i < steps; ++i) (*t)->Step();
  const double s = Seconds(t0);
  const double tokens = double(steps) * (*t)->tokens_per_step();
  const GptConfig& c = o.model;
  const double P = double((*t)->params().size());
  // Training FLOPs per token: 6 per parameter (forward + backward; wte counts once as the LM
  // head) plus attention scores and values, 12 * L * T * C (full T x T, as computed).
  const double flops_per_token = 6.0 * P + 12.0 * c.layers * o.seq_len * c.width;
  const double gflops = tokens * flops_per_token / s / 1e9;
  std::printf("model %s batch %d seq %d threads %d: %.0f tokens/s, %.2f GFLOP/s achieved\n",
              GptConfigString(c).c_str(), o.batch_size, o.seq_len, threads, tokens / s, gflops);
  std::printf(
      "ceiling: OpenBLAS sgemm 1024^3 %.2f GFLOP/s (same threads, same run); "
      "model/sgemm = %.1f%%\n",
      sgemm_gflops, 100.0 * gflops / sgemm_gflops);
  return 0;
}
