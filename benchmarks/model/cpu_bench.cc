// CPU throughput of the worker's GPT training step (forward, backward, gradient clipping,
// AdamW, batches from the synthetic data) in tokens/s and achieved FLOP/s, against the ceiling
// measured in the same run: sgemm GFLOP/s on 1024^3 products with the same threads and threading.
// The job is DefaultJobOptions (batch 8) with the model of `model=` at seq_len = its context.
// threading=pool (as shipped): the trainer's own threads (worker/model/cpu_threads.h), each
// product split into single-threaded sgemm calls; threading=openblas: OpenBLAS's own threads
// (how the trainer ran before 2026-12-03), for comparison.
//   model_cpu_bench [model=small|tiny|SPEC] [threads=N] [steps=N] [ceiling=0|1]
//                   [threading=pool|openblas]
// Besides the human-readable lines it prints, for benchmarks/model/cpu_vs_torch.py,
//   RESULT diloco <model> <threads> <tokens/s>   and   RESULT sgemm <threads> <GFLOP/s>
#include <cblas.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "worker/model/cpu_trainer.h"
#include "worker/model/gpt/gpt_trainer_family.h"
#include "worker/model/layers.h"
#include "worker/model/presets.h"

using namespace diloco;
using namespace diloco::model;
using Clock = std::chrono::steady_clock;

static double Seconds(Clock::time_point a) {
  return std::chrono::duration<double>(Clock::now() - a).count();
}

// GFLOP/s of 1024^3 sgemm (A B^T, the Linear layer's layout) through the trainer's Gemm (split
// over the pool, or one OpenBLAS call with its threads) over about `seconds`.
static double SgemmCeiling(double seconds) {
  const int n = 1024;
  std::vector<float> A(n * n, 0.5f), B(n * n, 0.25f), C(n * n);
  Gemm<float>(false, true, n, n, n, 1, A.data(), n, B.data(), n, 0, C.data(), n);
  const Clock::time_point t0 = Clock::now();
  int reps = 0;
  while (Seconds(t0) < seconds) {
    Gemm<float>(false, true, n, n, n, 1, A.data(), n, B.data(), n, 0, C.data(), n);
    ++reps;
  }
  return 2.0 * n * n * n * reps / Seconds(t0) / 1e9;
}

int main(int argc, char** argv) {
  int threads = 2, steps = 20;
  bool ceiling = true;
  std::string model = "small", threading = "pool";
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a.rfind("threads=", 0) == 0)
      threads = std::atoi(a.c_str() + 8);
    else if (a.rfind("steps=", 0) == 0)
      steps = std::atoi(a.c_str() + 6);
    else if (a.rfind("ceiling=", 0) == 0)
      ceiling = std::atoi(a.c_str() + 8) != 0;
    else if (a.rfind("model=", 0) == 0)
      model = a.substr(6);
    else if (a == "threading=pool" || a == "threading=openblas")
      threading = a.substr(10);
    else {
      std::fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  TrainerOptions o = DefaultJobOptions();
  absl::StatusOr<GptConfig> config = ParseGptConfig(model);
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
    return 2;
  }
  o.model = GptTrainerModel(*config);
  o.seq_len = o.model.context;
  if (threading == "pool") {
    o.threads = threads;
    SetCpuThreads(threads);
  } else {
    o.threads = 0;  // the trainer leaves OpenBLAS's threading as set here
    SetCpuThreads(1);
    openblas_set_num_threads(threads);
  }
  const double sgemm_gflops = ceiling ? SgemmCeiling(2.0) : 0.0;

  auto t = MakeCpuTrainer(o);
  if (!t.ok()) {
    std::fprintf(stderr, "%s\n", t.status().ToString().c_str());
    return 1;
  }
  for (int i = 0; i < 3; ++i) (*t)->Step();
  const Clock::time_point t0 = Clock::now();
  for (int i = 0; i < steps; ++i) (*t)->Step();
  const double s = Seconds(t0);
  const double tokens = double(steps) * (*t)->tokens_per_step();
  const GptConfig& c = *config;
  const double P = double((*t)->params().size());
  // Training FLOPs per token: 6 per parameter (forward + backward; wte counts once as the LM
  // head) plus attention scores and values, 12 * L * T * C (full T x T, as PyTorch's count).
  const double flops_per_token = 6.0 * P + 12.0 * c.layers * o.seq_len * c.width;
  const double gflops = tokens * flops_per_token / s / 1e9;
  std::printf("model %s batch %d seq %d threads %d (%s): %.0f tokens/s, %.2f GFLOP/s achieved\n",
              GptConfigString(c).c_str(), o.batch_size, o.seq_len, threads, threading.c_str(),
              tokens / s, gflops);
  std::printf("RESULT diloco %s %d %.1f\n", model.c_str(), threads, tokens / s);
  if (ceiling) {
    std::printf(
        "ceiling: sgemm 1024^3 %.2f GFLOP/s (same threads and threading, same run); "
        "model/sgemm = %.1f%%\n",
        sgemm_gflops, 100.0 * gflops / sgemm_gflops);
    std::printf("RESULT sgemm %d %.2f\n", threads, sgemm_gflops);
  }
  return 0;
}
