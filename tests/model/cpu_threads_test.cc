// The CPU trainer's threads (worker/model/cpu_threads.h): parts run concurrently and each once,
// a nested ParallelFor runs inline, a split matrix product equals one call, the attention
// backward over several threads equals the serial one, and a trainer with 2 threads trains as
// one with 1 does.
#include "worker/model/cpu_threads.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <random>
#include <thread>
#include <vector>

#include "worker/model/cpu_trainer.h"
#include "worker/model/layers.h"
#include "worker/model/presets.h"

namespace diloco::model {
namespace {

// Part p waits (at most 10 s) until every other part has started: run one after the other on
// one thread, the first part would wait out its bound and the check below would fail.
TEST(CpuThreads, PartsRunConcurrentlyAndEachOnce) {
  SetCpuThreads(3);
  ASSERT_EQ(CpuThreads(), 3);
  std::atomic<int> started{0};
  std::vector<std::atomic<int>> runs(3);
  std::atomic<bool> all_met{true};
  ParallelFor(3, [&](int p) {
    runs[p]++;
    started++;
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (started.load() < 3 && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (started.load() < 3) all_met = false;
  });
  EXPECT_TRUE(all_met) << "the parts did not run at the same time";
  for (auto& r : runs) EXPECT_EQ(r.load(), 1);
  // More parts than threads: each still once.
  std::vector<std::atomic<int>> many(17);
  ParallelFor(17, [&](int p) { many[p]++; });
  for (auto& r : many) EXPECT_EQ(r.load(), 1);
  SetCpuThreads(1);
}

TEST(CpuThreads, ANestedParallelForRunsInlineOnItsPartsThread) {
  SetCpuThreads(2);
  std::vector<std::atomic<int>> inner(2 * 5);
  std::atomic<bool> same_thread{true};
  ParallelFor(2, [&](int p) {
    const auto me = std::this_thread::get_id();
    ParallelFor(5, [&](int q) {
      inner[p * 5 + q]++;
      if (std::this_thread::get_id() != me) same_thread = false;
    });
  });
  for (auto& r : inner) EXPECT_EQ(r.load(), 1);
  EXPECT_TRUE(same_thread);
  SetCpuThreads(1);
}

std::vector<float> Random(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d;
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// C = alpha op(A) op(B) + beta C with padded leading dimensions, split over 3 threads (by rows
// when M >= N, by columns otherwise) against one single-threaded call.
TEST(CpuThreads, ASplitProductEqualsOneCall) {
  struct Shape {
    int M, N, K;
  };
  // Above the split threshold (20 MFLOP): 24 and 22 MFLOP, uneven block sizes.
  for (const Shape s : {Shape{601, 200, 100}, Shape{100, 701, 160}}) {
    for (const bool ta : {false, true}) {
      for (const bool tb : {false, true}) {
        const int lda = (ta ? s.M : s.K) + 3, ldb = (tb ? s.K : s.N) + 5, ldc = s.N + 7;
        const auto A = Random(size_t(ta ? s.K : s.M) * lda, 1);
        const auto B = Random(size_t(tb ? s.N : s.K) * ldb, 2);
        const auto C0 = Random(size_t(s.M) * ldc, 3);
        auto one = C0, split = C0;
        SetCpuThreads(1);
        Gemm<float>(ta, tb, s.M, s.N, s.K, 0.5f, A.data(), lda, B.data(), ldb, 0.25f, one.data(),
                    ldc);
        SetCpuThreads(3);
        Gemm<float>(ta, tb, s.M, s.N, s.K, 0.5f, A.data(), lda, B.data(), ldb, 0.25f, split.data(),
                    ldc);
        double worst = 0;
        for (size_t i = 0; i < one.size(); ++i)
          worst = std::max(
              worst, double(std::fabs(one[i] - split[i])) / (1.0 + std::fabs(double(one[i]))));
        EXPECT_LT(worst, 1e-5) << "M " << s.M << " N " << s.N << " ta " << ta << " tb " << tb;
      }
    }
  }
  SetCpuThreads(1);
}

// The (batch, head) pairs on 3 threads, each thread with its own scratch slice, give the serial
// result bit for bit (double: no product is split, each pair computes exactly as alone); so do 3
// threads given one slice (the backward then runs the pairs one after the other).
TEST(CpuThreads, AttentionOverThreadsEqualsSerial) {
  const int B = 2, T = 16, C = 24, NH = 3;
  std::vector<double> qkv(size_t(B) * T * 3 * C), dout(size_t(B) * T * C);
  std::mt19937 g(5);
  std::normal_distribution<double> d;
  for (double& x : qkv) x = d(g);
  for (double& x : dout) x = d(g);
  auto run = [&](int threads, std::vector<double>* out, std::vector<double>* dqkv, int slices) {
    SetCpuThreads(threads);
    std::vector<double> att(size_t(B) * NH * T * T), scratch(size_t(slices) * T * T);
    out->assign(size_t(B) * T * C, 0);
    dqkv->assign(qkv.size(), 0);
    AttentionForward(out->data(), att.data(), qkv.data(), B, T, C, NH);
    AttentionBackward(dqkv->data(), scratch.data(), dout.data(), qkv.data(), att.data(), B, T, C,
                      NH, slices);
  };
  std::vector<double> out1, dqkv1, out3, dqkv3, outs, dqkvs;
  run(1, &out1, &dqkv1, 1);
  run(3, &out3, &dqkv3, 3);
  run(3, &outs, &dqkvs, 1);  // one scratch slice for 3 threads: the pairs one after the other
  EXPECT_EQ(out1, out3);
  EXPECT_EQ(dqkv1, dqkv3);
  EXPECT_EQ(dqkv1, dqkvs);
  SetCpuThreads(1);
}

// The tiny GPT, 5 steps with 1 thread and with 2: the same losses to float rounding.
TEST(CpuThreads, ATrainerWithTwoThreadsTrainsAsWithOne) {
  auto losses = [](int threads) {
    TrainerOptions o = CiTrainingOptions();
    o.threads = threads;
    auto t = MakeCpuTrainer(o);
    EXPECT_TRUE(t.ok()) << t.status();
    std::vector<float> out;
    for (int s = 0; s < 5 && t.ok(); ++s) out.push_back((*t)->Step());
    return out;
  };
  const auto one = losses(1), two = losses(2);
  ASSERT_EQ(one.size(), 5u);
  ASSERT_EQ(two.size(), 5u);
  for (int s = 0; s < 5; ++s) EXPECT_NEAR(one[s], two[s], 1e-4 * std::fabs(one[s])) << s;
  SetCpuThreads(1);
}

}  // namespace
}  // namespace diloco::model
