// RDA merge, the SGD step, the partial and composed Nesterov steps and the staleness discount.
#include "kernels/outer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/optim.h"
#include "tests/kernels/test_data.h"

namespace diloco::kernels {
namespace {

double Norm(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += double(v) * v;
  return std::sqrt(s);
}

TEST(RdaMerge, OrthogonalDeltasKeepTheMeanNorm) {
  // d1 = e0 (norm 1), d2 = 3 e1 (norm 3), equal weights: mean norm 2, mean direction
  // (e0 + e1)/2, so out = sqrt(2) (e0 + e1): norm 2. A plain mean would have norm 1.58.
  std::vector<float> d1(4, 0.0f), d2(4, 0.0f), out(4);
  d1[0] = 1.0f;
  d2[1] = 3.0f;
  const std::span<const float> deltas[] = {d1, d2};
  const float w[] = {1.0f, 1.0f};
  ASSERT_TRUE(RdaMerge(deltas, w, out).ok());
  EXPECT_NEAR(out[0], std::sqrt(2.0f), 1e-6f);
  EXPECT_NEAR(out[1], std::sqrt(2.0f), 1e-6f);
  EXPECT_EQ(out[2], 0.0f);
  EXPECT_NEAR(Norm(out), 2.0, 1e-6);
}

TEST(RdaMerge, WeightsAndParallelDeltas) {
  // Same direction u, norms 1 and 4, weights 3:1 -> norm (3*1 + 1*4)/4 = 1.75 along u.
  const std::vector<float> u = testing::Gaussian(1000, 1);
  const double nu = Norm(u);
  std::vector<float> a(1000), b(1000), out(1000);
  for (size_t i = 0; i < u.size(); ++i) {
    a[i] = u[i] / nu;
    b[i] = 4 * u[i] / nu;
  }
  const std::span<const float> deltas[] = {a, b};
  const float w[] = {3.0f, 1.0f};
  ASSERT_TRUE(RdaMerge(deltas, w, out).ok());
  for (size_t i = 0; i < u.size(); ++i) ASSERT_NEAR(out[i], 1.75 * u[i] / nu, 1e-5);
}

TEST(RdaMerge, ZeroDeltaAndErrors) {
  std::vector<float> z(8, 0.0f), d(8, 1.0f), out(8);
  const std::span<const float> deltas[] = {z, d};
  const float w[] = {1.0f, 1.0f};
  ASSERT_TRUE(RdaMerge(deltas, w, out).ok());
  // mean norm sqrt(8)/2, direction d: each value 0.5.
  for (float v : out) EXPECT_NEAR(v, 0.5f, 1e-6f);
  const float zero_w[] = {0.0f, 0.0f};
  EXPECT_FALSE(RdaMerge(deltas, zero_w, out).ok());
  const float neg_w[] = {-1.0f, 2.0f};
  EXPECT_FALSE(RdaMerge(deltas, neg_w, out).ok());
  std::vector<float> short_out(7);
  EXPECT_FALSE(RdaMerge(deltas, w, short_out).ok());
}

TEST(SgdStep, IsTheNesterovStepWithoutMomentumOnThetaAndLeavesNoState) {
  // Mixed signs and magnitudes, and a momentum buffer of any content: theta moves exactly as the
  // Nesterov steps with mu = 0 move it, and SgdStep has no momentum to write.
  const NesterovParams p{.lr = 4.0f, .mu = 0.0f};
  std::vector<float> theta(300), m(300), d(300);
  for (int i = 0; i < 300; ++i) {
    theta[i] = 0.01f * float(i % 37) - 0.2f;
    m[i] = 0.5f * float(i % 5) - 1.0f;
    d[i] = 0.003f * float((i * 7) % 41) - 0.06f;
  }
  std::vector<float> sgd = theta, full = theta, partial = theta, m_full = m, m_partial = m;
  ASSERT_TRUE(SgdStep(p.lr, sgd, d).ok());
  NesterovStep(p, full, m_full, d);
  ASSERT_TRUE(PartialNesterovStep(p, 0.3, partial, m_partial, d).ok());
  EXPECT_EQ(sgd, full);
  EXPECT_EQ(sgd, partial);
  EXPECT_NEAR(theta[1] - sgd[1], 4.0 * d[1], 1e-6);
}

TEST(SgdStep, MismatchedSizesAreRefusedAndChangeNothing) {
  std::vector<float> theta(4, 1.0f), short_d(3, 0.1f);
  EXPECT_EQ(SgdStep(1.0f, theta, short_d).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(theta, std::vector<float>(4, 1.0f));
}

TEST(PartialNesterovStep, AFullShareIsTheNesterovStep) {
  const NesterovParams p{.lr = 0.7f, .mu = 0.9f};
  std::vector<float> theta(64, 1.0f), m(64, 0.3f), d(64, -0.2f);
  std::vector<float> theta2 = theta, m2 = m;
  ASSERT_TRUE(PartialNesterovStep(p, 1.0, theta, m, d).ok());
  NesterovStep(p, theta2, m2, d);
  EXPECT_EQ(theta, theta2);
  EXPECT_EQ(m, m2);
}

TEST(PartialNesterovStep, AQuarterShareDecaysAndLooksAheadByAQuarter) {
  // m = (1 - 0.25 * 0.1) * 0.3 + 0.05 = 0.3425; theta = 1 - 0.7 * (0.05 + 0.225 * 0.3425).
  const NesterovParams p{.lr = 0.7f, .mu = 0.9f};
  std::vector<float> theta(8, 1.0f), m(8, 0.3f), d(8, 0.05f);
  ASSERT_TRUE(PartialNesterovStep(p, 0.25, theta, m, d).ok());
  EXPECT_NEAR(m[0], 0.3425, 1e-6);
  EXPECT_NEAR(theta[0], 1 - 0.7 * (0.05 + 0.225 * 0.3425), 1e-6);
}

TEST(PartialNesterovStep, SplitRoundsReachTheVelocityOfFullRounds) {
  // A constant full-round delta D = 1: 200 full rounds against 800 rounds of a quarter share
  // with d = D / 4. Both settle at m = D / (1 - mu) and move theta by lr * D / (1 - mu) per full
  // round's worth.
  const NesterovParams p{.lr = 0.7f, .mu = 0.9f};
  std::vector<float> full(4, 0.0f), mf(4, 0.0f), dfull(4, 1.0f);
  std::vector<float> split(4, 0.0f), ms(4, 0.0f), dq(4, 0.25f);
  for (int r = 0; r < 200; ++r) {
    const float before_f = full[0], before_s = split[0];
    NesterovStep(p, full, mf, dfull);
    for (int k = 0; k < 4; ++k) ASSERT_TRUE(PartialNesterovStep(p, 0.25, split, ms, dq).ok());
    if (r == 199) {
      EXPECT_NEAR(before_f - full[0], 7.0, 1e-3);
      EXPECT_NEAR(before_s - split[0], 7.0, 1e-2);
      EXPECT_NEAR(ms[0], 10.0, 1e-2);
    }
  }
}

TEST(PartialNesterovStep, ASliverRoundAfterFullRoundsMovesByASliver) {
  // At the velocity of full rounds of D = 1 (m = 10), one round holding a tenth of the work
  // (d = 0.1): the partial step moves theta by 0.7 * (0.1 + 0.09 * 10) = 0.7, a tenth of a full
  // round's 7; a whole Nesterov step would move it by 0.7 * (0.1 + 0.9 * 9.1) = 5.803.
  const NesterovParams p{.lr = 0.7f, .mu = 0.9f};
  std::vector<float> theta(4, 0.0f), m(4, 10.0f), d(4, 0.1f);
  std::vector<float> theta_full = theta, m_full = m;
  ASSERT_TRUE(PartialNesterovStep(p, 0.1, theta, m, d).ok());
  NesterovStep(p, theta_full, m_full, d);
  EXPECT_NEAR(-theta[0], 0.7, 1e-5);
  EXPECT_NEAR(-theta_full[0], 5.803, 1e-4);
}

TEST(PartialNesterovStep, BadShareOrSizesAreRefusedAndChangeNothing) {
  const NesterovParams p{};
  std::vector<float> theta(4, 1.0f), m(4, 0.5f), d(4, 0.1f), short_d(3, 0.1f);
  EXPECT_EQ(PartialNesterovStep(p, 0.0, theta, m, d).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PartialNesterovStep(p, 1.5, theta, m, d).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(PartialNesterovStep(p, 0.5, theta, m, short_d).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(theta, std::vector<float>(4, 1.0f));
  EXPECT_EQ(m, std::vector<float>(4, 0.5f));
}

TEST(ComposedNesterovStep, AFullShareFromPhaseZeroIsTheNesterovStep) {
  const NesterovParams p{.lr = 0.7f, .mu = 0.9f};
  std::vector<float> theta(64, 1.0f), m(64, 0.3f), d(64, -0.2f);
  std::vector<float> theta2 = theta, m2 = m;
  double phase = 0;
  ASSERT_TRUE(ComposedNesterovStep(p, 1.0, &phase, theta, m, d).ok());
  NesterovStep(p, theta2, m2, d);
  EXPECT_EQ(phase, 0);
  for (size_t i = 0; i < theta.size(); ++i) {
    EXPECT_FLOAT_EQ(theta[i], theta2[i]);
    EXPECT_FLOAT_EQ(m[i], m2[i]);
  }
}

// Rounds of shares {0.3, 0.45, 0.25} with deltas in proportion, then {0.6, 0.6, 0.8} (the
// second crosses the end of a full round, the third too): after shares adding up to 3 full
// rounds, theta and the momentum are where three Nesterov steps on the summed deltas put them.
TEST(ComposedNesterovStep, RoundsAddingUpToFullRoundsComposeExactly) {
  const NesterovParams p{.lr = 0.7f, .mu = 0.9f};
  const std::vector<float> d1 = testing::Gaussian(257, 1), d2 = testing::Gaussian(257, 2),
                           d3 = testing::Gaussian(257, 3);
  std::vector<float> theta = testing::Gaussian(257, 4), m = testing::Gaussian(257, 5);
  std::vector<float> theta_ref = theta, m_ref = m;
  auto scaled = [](const std::vector<float>& d, float s) {
    std::vector<float> out(d);
    for (float& v : out) v *= s;
    return out;
  };
  double phase = 0;
  for (double s : {0.3, 0.45, 0.25})
    ASSERT_TRUE(ComposedNesterovStep(p, s, &phase, theta, m, scaled(d1, float(s))).ok());
  EXPECT_NEAR(phase, 0, 1e-9);
  NesterovStep(p, theta_ref, m_ref, d1);
  for (size_t i = 0; i < theta.size(); ++i) {
    EXPECT_NEAR(theta[i], theta_ref[i], 1e-5);
    EXPECT_NEAR(m[i], m_ref[i], 1e-5);
  }
  // Full round 2 is 0.6 of d2, then 0.4 of d3: the next round (0.6 of d3) crosses the end and
  // is cut by share, 0.4 to round 2 and 0.2 to round 3, which 0.8 of d3 completes.
  ASSERT_TRUE(ComposedNesterovStep(p, 0.6, &phase, theta, m, scaled(d2, 0.6f)).ok());
  ASSERT_TRUE(ComposedNesterovStep(p, 0.6, &phase, theta, m, scaled(d3, 0.6f)).ok());
  EXPECT_NEAR(phase, 0.2, 1e-9);
  ASSERT_TRUE(ComposedNesterovStep(p, 0.8, &phase, theta, m, scaled(d3, 0.8f)).ok());
  EXPECT_NEAR(phase, 0, 1e-9);
  std::vector<float> round2(d2.size());
  for (size_t i = 0; i < round2.size(); ++i) round2[i] = 0.6f * d2[i] + 0.4f * d3[i];
  NesterovStep(p, theta_ref, m_ref, round2);
  NesterovStep(p, theta_ref, m_ref, d3);  // 0.2 + 0.8 of d3
  for (size_t i = 0; i < theta.size(); ++i) {
    EXPECT_NEAR(theta[i], theta_ref[i], 1e-4);
    EXPECT_NEAR(m[i], m_ref[i], 1e-4);
  }
}

TEST(ComposedNesterovStep, ASliverRoundAfterFullRoundsMovesByASliver) {
  // At the velocity of full rounds of D = 1 (m = 10), a round holding a tenth of the work
  // (d = 0.1) from phase 0: p = 0.9 * 10 + 0.1 = 9.1, theta moves 0.7 * (0.1 + 0.09 * 9.1) =
  // 0.6433, about a tenth of a full round's 7.
  const NesterovParams p{.lr = 0.7f, .mu = 0.9f};
  std::vector<float> theta(4, 0.0f), m(4, 10.0f), d(4, 0.1f);
  double phase = 0;
  ASSERT_TRUE(ComposedNesterovStep(p, 0.1, &phase, theta, m, d).ok());
  EXPECT_NEAR(-theta[0], 0.6433, 1e-5);
  EXPECT_NEAR(m[0], 9.1, 1e-5);
  EXPECT_NEAR(phase, 0.1, 1e-12);
}

TEST(ComposedNesterovStep, BadSharePhaseOrSizesAreRefusedAndChangeNothing) {
  const NesterovParams p{};
  std::vector<float> theta(4, 1.0f), m(4, 0.5f), d(4, 0.1f), short_d(3, 0.1f);
  double phase = 0.25, bad_phase = 1.0;
  EXPECT_EQ(ComposedNesterovStep(p, 0.0, &phase, theta, m, d).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ComposedNesterovStep(p, 1.5, &phase, theta, m, d).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ComposedNesterovStep(p, 0.5, &phase, theta, m, short_d).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ComposedNesterovStep(p, 0.5, &bad_phase, theta, m, d).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(phase, 0.25);
  EXPECT_EQ(theta, std::vector<float>(4, 1.0f));
  EXPECT_EQ(m, std::vector<float>(4, 0.5f));
}

TEST(StalenessDiscount, Values) {
  EXPECT_EQ(StalenessDiscount(0, 0.5f), 1.0f);
  EXPECT_EQ(StalenessDiscount(7, 0.0f), 1.0f);
  EXPECT_NEAR(StalenessDiscount(3, 0.5f), 0.5f, 1e-7f);
  EXPECT_NEAR(StalenessDiscount(1, 1.0f), 0.5f, 1e-7f);
  EXPECT_LT(StalenessDiscount(10, 1.0f), StalenessDiscount(9, 1.0f));
}

}  // namespace
}  // namespace diloco::kernels
