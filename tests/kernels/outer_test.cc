// RDA merge and the staleness discount.
#include "kernels/outer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

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

TEST(StalenessDiscount, Values) {
  EXPECT_EQ(StalenessDiscount(0, 0.5f), 1.0f);
  EXPECT_EQ(StalenessDiscount(7, 0.0f), 1.0f);
  EXPECT_NEAR(StalenessDiscount(3, 0.5f), 0.5f, 1e-7f);
  EXPECT_NEAR(StalenessDiscount(1, 1.0f), 0.5f, 1e-7f);
  EXPECT_LT(StalenessDiscount(10, 1.0f), StalenessDiscount(9, 1.0f));
}

}  // namespace
}  // namespace diloco::kernels
