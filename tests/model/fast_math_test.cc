// The float fast paths against libm and the double layers: fast_math.h's tanh and exp over
// their whole useful range, and fast_f32.h's kernels (what the float model runs) against the
// double reference code of layers.h on random inputs.
#include "worker/model/fast_math.h"

#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "worker/model/layers.h"

namespace diloco::model {
namespace {

TEST(FastMath, TanhWithinFewUlpOfOne) {
  double worst = 0;
  for (double x = -20; x <= 20; x += 1e-4) {
    const float xf = static_cast<float>(x);
    worst = std::max(worst, std::abs(double(FastTanh(xf)) - std::tanh(double(xf))));
  }
  EXPECT_LT(worst, 5e-7);
}

TEST(FastMath, ExpWithinTwoUlp) {
  double worst = 0;
  for (double x = -87; x <= 88; x += 1e-3) {
    const float xf = static_cast<float>(x);
    const double e = std::exp(double(xf));
    worst = std::max(worst, std::abs(double(FastExp(xf)) - e) / e);
  }
  EXPECT_LT(worst, 2 * 5.97e-8);
  EXPECT_EQ(FastExp(0.0f), 1.0f);
  EXPECT_LT(FastExp(-1000.0f), 1e-37f);
}

// Runs a float layer and its double reference on the same inputs; returns the max relative
// difference of the outputs (relative to the largest magnitude of the reference).
double MaxRelDiff(const std::vector<float>& f, const std::vector<double>& d) {
  double m = 0, scale = 1e-30;
  for (size_t i = 0; i < d.size(); ++i) {
    m = std::max(m, std::abs(double(f[i]) - d[i]));
    scale = std::max(scale, std::abs(d[i]));
  }
  return m / scale;
}

struct Inputs {
  std::vector<double> d;
  std::vector<float> f;
};

Inputs Random(size_t n, std::mt19937_64& rng, double scale) {
  std::normal_distribution<double> dist(0.0, scale);
  Inputs in;
  for (size_t i = 0; i < n; ++i) {
    in.f.push_back(static_cast<float>(dist(rng)));
    in.d.push_back(in.f.back());
  }
  return in;
}

TEST(FastF32, GeluMatchesDouble) {
  std::mt19937_64 rng(1);
  const int64_t n = 4099;  // not a multiple of any vector width
  Inputs x = Random(n, rng, 3.0), dy = Random(n, rng, 1.0);
  std::vector<float> yf(n), dxf(n, 0.5f);
  std::vector<double> yd(n), dxd(n, 0.5);
  GeluForward(yf.data(), x.f.data(), n);
  GeluForward(yd.data(), x.d.data(), n);
  EXPECT_LT(MaxRelDiff(yf, yd), 1e-6);
  // The derivative's x^3 terms lose a few more float bits than the forward.
  GeluBackward(dxf.data(), x.f.data(), dy.f.data(), n);  // accumulates onto 0.5
  GeluBackward(dxd.data(), x.d.data(), dy.d.data(), n);
  EXPECT_LT(MaxRelDiff(dxf, dxd), 1e-5);
  GeluBackward(dxf.data(), x.f.data(), dy.f.data(), n, /*dinp_overwrite=*/true);
  GeluBackward(dxd.data(), x.d.data(), dy.d.data(), n, /*dinp_overwrite=*/true);
  EXPECT_LT(MaxRelDiff(dxf, dxd), 1e-5);
}

TEST(FastF32, LayerNormMatchesDouble) {
  std::mt19937_64 rng(2);
  const int N = 7, C = 67;
  Inputs x = Random(N * C, rng, 2.0), w = Random(C, rng, 1.0), b = Random(C, rng, 1.0);
  Inputs dy = Random(N * C, rng, 1.0);
  std::vector<float> yf(N * C), mf(N), sf(N), dxf(N * C, 0), dwf(C, 0), dbf(C, 0);
  std::vector<double> yd(N * C), md(N), sd(N), dxd(N * C, 0), dwd(C, 0), dbd(C, 0);
  LayerNormForward(yf.data(), mf.data(), sf.data(), x.f.data(), w.f.data(), b.f.data(), N, C);
  LayerNormForward(yd.data(), md.data(), sd.data(), x.d.data(), w.d.data(), b.d.data(), N, C);
  EXPECT_LT(MaxRelDiff(yf, yd), 1e-5);
  LayerNormBackward(dxf.data(), dwf.data(), dbf.data(), dy.f.data(), x.f.data(), w.f.data(),
                    mf.data(), sf.data(), N, C);
  LayerNormBackward(dxd.data(), dwd.data(), dbd.data(), dy.d.data(), x.d.data(), w.d.data(),
                    md.data(), sd.data(), N, C);
  EXPECT_LT(MaxRelDiff(dxf, dxd), 1e-5);
  EXPECT_LT(MaxRelDiff(dwf, dwd), 1e-5);
  EXPECT_LT(MaxRelDiff(dbf, dbd), 1e-5);
}

TEST(FastF32, SoftmaxAndCrossEntropyMatchDouble) {
  std::mt19937_64 rng(3);
  const int N = 5, V = 37;
  Inputs logits = Random(N * V, rng, 4.0);
  std::vector<int32_t> targets = {0, 36, 5, 17, 3};
  std::vector<float> pf(N * V), lf(N);
  std::vector<double> pd(N * V), ld(N);
  const double mf =
      CrossEntropyForward(pf.data(), lf.data(), logits.f.data(), targets.data(), N, V);
  const double md =
      CrossEntropyForward(pd.data(), ld.data(), logits.d.data(), targets.data(), N, V);
  EXPECT_NEAR(mf, md, 1e-6 * md);
  EXPECT_LT(MaxRelDiff(pf, pd), 1e-6);
  EXPECT_LT(MaxRelDiff(lf, ld), 1e-6);
  // Causal attention: the softmax rows of different lengths.
  const int B = 2, T = 9, C = 8, NH = 2;
  Inputs qkv = Random(B * T * 3 * C, rng, 1.0);
  std::vector<float> of(B * T * C), af(B * NH * T * T);
  std::vector<double> od(B * T * C), ad(B * NH * T * T);
  AttentionForward(of.data(), af.data(), qkv.f.data(), B, T, C, NH);
  AttentionForward(od.data(), ad.data(), qkv.d.data(), B, T, C, NH);
  EXPECT_LT(MaxRelDiff(af, ad), 1e-6);
  EXPECT_LT(MaxRelDiff(of, od), 1e-5);
}

}  // namespace
}  // namespace diloco::model
