// Optimizer oracles: the Nesterov convention and why per-arrival steps are wrong, Delayed
// Nesterov's equivalence, the delta sign convention, a hand-computed AdamW trace, and fast ==
// reference for every optimizer loop.
#include "kernels/optim.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/outer.h"
#include "kernels/reference.h"
#include "tests/kernels/test_data.h"

namespace diloco::kernels {
namespace {

using testing::Bits;

TEST(Nesterov, OneStepPerArrivalCompoundsMomentum) {
  // Starting from m = 0, four sequential steps on the same g move theta by
  // (1.9 + 2.71 + 3.439 + 4.0951) * lr * g = 12.1441 * lr * g; one step on their mean moves it
  // by (1 + mu) * lr * g = 1.9 * lr * g (the Nesterov look-ahead, kernels/optim.h).
  const NesterovParams p{.lr = 0.5f, .mu = 0.9f};
  const float g = 2.0f;
  std::vector<float> theta(8, 0.0f), m(8, 0.0f), d(8, g);
  for (int k = 0; k < 4; ++k) NesterovStep(p, theta, m, d);
  EXPECT_NEAR(theta[0], -12.1441f * p.lr * g, 1e-4f);
  EXPECT_NEAR(m[0], 3.439f * g, 1e-5f);

  std::vector<float> theta1(8, 0.0f), m1(8, 0.0f);
  NesterovStep(p, theta1, m1, d);
  EXPECT_NEAR(theta1[0], -1.9f * p.lr * g, 1e-6f);
  EXPECT_NEAR(m1[0], g, 0.0f);
}

TEST(Nesterov, SignConventionMovesThetaTowardWorkers) {
  // Workers moved from the anchor 0 to +1: delta = anchor - local = -1, and the outer step
  // moves theta up, toward the workers. With mu = 0 and lr = 1 it lands exactly on them.
  std::vector<float> anchor(16, 0.0f), local(16, 1.0f), delta(16);
  Delta(anchor, local, delta);
  EXPECT_EQ(delta[0], -1.0f);
  std::vector<float> theta = anchor, m(16, 0.0f);
  NesterovStep(NesterovParams{.lr = 1.0f, .mu = 0.0f}, theta, m, delta);
  EXPECT_EQ(theta[0], 1.0f);
  std::vector<float> theta2 = anchor, m2(16, 0.0f);
  NesterovStep(NesterovParams{.lr = 0.7f, .mu = 0.9f}, theta2, m2, delta);
  EXPECT_GT(theta2[0], 0.0f);
}

TEST(DelayedNesterov, EqualPushesEqualOneSynchronousStepOnTheirMean) {
  const size_t n = 1000;
  const int workers = 4;
  const NesterovParams p{.lr = 0.7f, .mu = 0.9f};
  std::vector<float> theta_dn = testing::Gaussian(n, 1), m_dn(n, 0.0f);
  std::vector<float> theta_sync = theta_dn, m_sync(n, 0.0f);
  DelayedNesterov dn(p, workers, n);
  for (int round = 0; round < 3; ++round) {  // three periods: momentum carries over
    std::vector<std::vector<float>> g;
    std::vector<float> mean(n, 0.0f);
    for (int k = 0; k < workers; ++k) {
      g.push_back(testing::Gaussian(n, 100 * round + k + 2, 0.1f));
      for (size_t i = 0; i < n; ++i) mean[i] += g[k][i] / workers;
    }
    for (int k = 0; k < workers; ++k) {
      EXPECT_EQ(dn.pending(), k);
      ASSERT_TRUE(dn.Arrive(theta_dn, m_dn, g[k]).ok());
    }
    EXPECT_EQ(dn.pending(), 0);
    NesterovStep(p, theta_sync, m_sync, mean);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_NEAR(theta_dn[i], theta_sync[i], 2e-6f) << "round " << round << " i " << i;
      ASSERT_NEAR(m_dn[i], m_sync[i], 2e-6f);
    }
  }
  // Mid-period: only the plain SGD part has been applied.
  std::vector<float> theta_mid = theta_dn, m_mid = m_dn;
  const std::vector<float> g = testing::Gaussian(n, 77);
  ASSERT_TRUE(dn.Arrive(theta_mid, m_mid, g).ok());
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(m_mid[i], m_dn[i]);
    ASSERT_NEAR(theta_mid[i], theta_dn[i] - p.lr / workers * g[i], 1e-6f);
  }
  std::vector<float> wrong(n + 1);
  EXPECT_FALSE(dn.Arrive(wrong, m_mid, g).ok());
}

TEST(AdamW, HandComputedTwoStepTrace) {
  // p0 = 1, lr = 0.1, beta1 = 0.9, beta2 = 0.99, eps = 1e-8, wd = 0.1, grads 0.5 then -0.25.
  // Step 1: m = 0.05, v = 0.0025, mhat = 0.05/0.1 = 0.5, vhat = 0.0025/0.01 = 0.25,
  //         p = 1 - 0.1 * (0.5/(0.5 + 1e-8) + 0.1 * 1) = 0.890000002.
  // Step 2: m = 0.045 - 0.025 = 0.02, v = 0.002475 + 0.000625 = 0.0031,
  //         mhat = 0.02/0.19 = 0.1052631579, vhat = 0.0031/0.0199 = 0.1557788945,
  //         sqrt(vhat) = 0.3946883510, mhat/sqrt = 0.2666985, + 0.1 * 0.890000002 = 0.3556985,
  //         p = 0.890000002 - 0.03556985 = 0.8544301.
  const AdamWParams hp{
      .lr = 0.1f, .beta1 = 0.9f, .beta2 = 0.99f, .eps = 1e-8f, .weight_decay = 0.1f};
  std::vector<float> p(3, 1.0f), m(3, 0.0f), v(3, 0.0f);
  AdamWStep(hp, 1, p, std::vector<float>(3, 0.5f), m, v);
  EXPECT_NEAR(m[0], 0.05f, 1e-7f);  // float: 1 - 0.9 = 0.100000024
  EXPECT_NEAR(v[0], 0.0025f, 1e-8f);
  EXPECT_NEAR(p[0], 0.890000002f, 1e-7f);
  AdamWStep(hp, 2, p, std::vector<float>(3, -0.25f), m, v);
  EXPECT_NEAR(m[0], 0.02f, 1e-7f);
  EXPECT_NEAR(v[0], 0.0031f, 1e-8f);
  EXPECT_NEAR(p[0], 0.8544301f, 1e-6f);
}

class OptimFastVsRef : public ::testing::TestWithParam<size_t> {};

TEST_P(OptimFastVsRef, BitIdentical) {
  const size_t n = GetParam();
  const std::vector<float> d = testing::Gaussian(n, 1), g = testing::Gaussian(n, 2);
  std::vector<float> t1 = testing::Gaussian(n, 3), m1 = testing::Gaussian(n, 4);
  std::vector<float> t2 = t1, m2 = m1;
  NesterovStep(NesterovParams{}, t1, m1, d);
  ref::NesterovStep(NesterovParams{}, t2, m2, d);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(Bits(t1[i]), Bits(t2[i]));
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(Bits(m1[i]), Bits(m2[i]));

  std::vector<float> v1(n, 0.01f), v2 = v1;
  for (int64_t step = 1; step <= 3; ++step) {
    AdamWStep(AdamWParams{}, step, t1, g, m1, v1);
    ref::AdamWStep(AdamWParams{}, step, t2, g, m2, v2);
  }
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(Bits(t1[i]), Bits(t2[i]));
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(Bits(v1[i]), Bits(v2[i]));

  std::vector<float> out1(n), out2(n);
  Delta(d, g, out1);
  ref::Delta(d, g, out2);
  EXPECT_EQ(out1, out2);
  LerpAdopt(d, out1, 0.3f);
  ref::LerpAdopt(d, out2, 0.3f);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(Bits(out1[i]), Bits(out2[i]));
}

INSTANTIATE_TEST_SUITE_P(Sizes, OptimFastVsRef, ::testing::Values(0, 1, 1000, 300001));

TEST(LerpAdopt, AlphaZeroTakesGlobal) {
  std::vector<float> global = testing::Gaussian(100, 1), local = testing::Gaussian(100, 2);
  LerpAdopt(global, local, 0.0f);
  EXPECT_EQ(local, global);
}

// local - (anchor - pushed) is the work since the push; it must survive adoption exactly
// (up to one rounding of each sum), and the anchor must become the global values.
TEST(RebaseAdopt, KeepsTheStepsTakenSinceThePush) {
  const size_t n = 70001;  // more than one task of the thread pool
  const std::vector<float> global = testing::Gaussian(n, 1), anchor0 = testing::Gaussian(n, 2);
  const std::vector<float> pushed = testing::Gaussian(n, 3), since = testing::Gaussian(n, 4);
  std::vector<float> anchor = anchor0, local(n);
  for (size_t i = 0; i < n; ++i) local[i] = anchor0[i] - pushed[i] + 0.01f * since[i];
  RebaseAdopt(global, anchor, local, pushed);
  EXPECT_EQ(anchor, global);
  for (size_t i = 0; i < n; ++i)
    ASSERT_NEAR(local[i], global[i] + 0.01f * since[i], 1e-5f * (8 + std::abs(global[i]))) << i;
}

// Nothing of this worker's in the new global values: all of local - anchor is kept.
TEST(RebaseAdopt, WithoutAPushKeepsEverythingSinceTheAnchor) {
  const std::vector<float> global = {1, 2, 3}, local0 = {0.5f, 0.25f, -1};
  std::vector<float> anchor = {0, 0, 0}, local = local0;
  RebaseAdopt(global, anchor, local, {});
  EXPECT_EQ(anchor, global);
  EXPECT_EQ(local, (std::vector<float>{1.5f, 2.25f, 2}));
}

// Local values moved on to anchor - c x pushed at the push: adoption takes c x pushed out, so
// again only the work since the push is kept.
TEST(RebaseAdopt, TakesOutTheScaledPushOfAnExtrapolatingWorker) {
  const std::vector<float> global = {1, 2, 3}, pushed = {0.5f, -1, 2};
  std::vector<float> anchor = {0, 0, 0}, local = {-0.625f + 0.25f, 1.25f, -2.5f - 1};
  RebaseAdopt(global, anchor, local, pushed, 1.25f);
  EXPECT_EQ(anchor, global);
  EXPECT_EQ(local, (std::vector<float>{1.25f, 2, 2}));
}

TEST(Axpy, AddsAScaledSpan) {
  const size_t n = 70001;
  const std::vector<float> x = testing::Gaussian(n, 1), y0 = testing::Gaussian(n, 2);
  std::vector<float> y = y0;
  Axpy(-0.25f, x, y);
  for (size_t i = 0; i < n; ++i)
    ASSERT_NEAR(y[i], y0[i] - 0.25f * x[i], 1e-6f * (1 + std::abs(y0[i]) + std::abs(x[i]))) << i;
}

}  // namespace
}  // namespace diloco::kernels
