// Gradient checks: every CPU layer and the whole model, in double precision, against central
// finite differences. Each layer is wrapped into a scalar loss L = sum(out * R) for a fixed
// random R, so dL/dout = R; tolerance: relative error 1e-6 (typical is 1e-9).
#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "worker/model/gpt.h"
#include "worker/model/layers.h"

namespace diloco::model {
namespace {

using Vec = std::vector<double>;

Vec Random(size_t n, std::mt19937_64& rng, double scale = 1.0) {
  std::normal_distribution<double> d(0.0, scale);
  Vec v(n);
  for (double& x : v) x = d(rng);
  return v;
}

double Dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Checks analytic gradient `grad` of f with respect to x (perturbed in place) at every
// coordinate (or `stride`-spaced ones).
void CheckGrad(const char* what, Vec& x, const Vec& grad, const std::function<double()>& f,
               size_t stride = 1, double tol = 1e-6) {
  ASSERT_EQ(x.size(), grad.size());
  double worst = 0;
  for (size_t i = 0; i < x.size(); i += stride) {
    const double h = 1e-5 * std::max(1.0, std::abs(x[i]));
    const double x0 = x[i];
    x[i] = x0 + h;
    const double fp = f();
    x[i] = x0 - h;
    const double fm = f();
    x[i] = x0;
    const double num = (fp - fm) / (2 * h);
    const double err = std::abs(num - grad[i]) / std::max(1e-3, std::abs(num) + std::abs(grad[i]));
    worst = std::max(worst, err);
    EXPECT_LT(err, tol) << what << "[" << i << "]: numeric " << num << " analytic " << grad[i];
    if (err >= tol) return;
  }
  ::testing::Test::RecordProperty(what, std::to_string(worst));
}

TEST(ModelGradcheck, LayerNorm) {
  std::mt19937_64 rng(1);
  const int N = 5, C = 7;
  Vec x = Random(N * C, rng), w = Random(C, rng), b = Random(C, rng), r = Random(N * C, rng);
  Vec out(N * C), mean(N), rstd(N);
  auto f = [&] {
    LayerNormForward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    return Dot(out, r);
  };
  f();
  Vec dx(N * C, 0), dw(C, 0), db(C, 0);
  LayerNormBackward(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), mean.data(),
                    rstd.data(), N, C);
  CheckGrad("dx", x, dx, f);
  CheckGrad("dw", w, dw, f);
  CheckGrad("db", b, db, f);
}

TEST(ModelGradcheck, LinearWithBias) {
  std::mt19937_64 rng(2);
  const int N = 6, C = 5, OC = 4;
  Vec x = Random(N * C, rng), w = Random(OC * C, rng), b = Random(OC, rng), r = Random(N * OC, rng);
  Vec out(N * OC);
  auto f = [&] {
    LinearForward(out.data(), x.data(), w.data(), b.data(), N, C, OC);
    return Dot(out, r);
  };
  f();
  // Against the definition too: out[n,o] = b[o] + sum_c x[n,c] w[o,c] ([out,in] layout).
  EXPECT_NEAR(
      out[1 * OC + 2],
      b[2] +
          [&] {
            double s = 0;
            for (int c = 0; c < C; ++c) s += x[1 * C + c] * w[2 * C + c];
            return s;
          }(),
      1e-12);
  Vec dx(N * C, 0), dw(OC * C, 0), db(OC, 0);
  LinearBackward(dx.data(), dw.data(), db.data(), r.data(), x.data(), w.data(), N, C, OC);
  CheckGrad("dx", x, dx, f);
  CheckGrad("dw", w, dw, f);
  CheckGrad("db", b, db, f);
}

TEST(ModelGradcheck, CausalAttention) {
  std::mt19937_64 rng(3);
  const int B = 2, T = 5, C = 8, NH = 2;
  Vec qkv = Random(B * T * 3 * C, rng), r = Random(B * T * C, rng);
  Vec out(B * T * C), att(B * NH * T * T), scratch(T * T);
  auto f = [&] {
    AttentionForward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    return Dot(out, r);
  };
  f();
  // Causality: probabilities above the diagonal are zero, rows sum to one.
  for (int i = 0; i < T; ++i) {
    double s = 0;
    for (int j = 0; j < T; ++j) {
      if (j > i) {
        EXPECT_EQ(att[i * T + j], 0.0);
      }
      s += att[i * T + j];
    }
    EXPECT_NEAR(s, 1.0, 1e-12);
  }
  Vec dqkv(qkv.size(), 0);
  AttentionBackward(dqkv.data(), scratch.data(), r.data(), qkv.data(), att.data(), B, T, C, NH);
  CheckGrad("dqkv", qkv, dqkv, f);
}

TEST(ModelGradcheck, Gelu) {
  std::mt19937_64 rng(4);
  const int n = 50;
  Vec x = Random(n, rng, 2.0), r = Random(n, rng), out(n);
  auto f = [&] {
    GeluForward(out.data(), x.data(), n);
    return Dot(out, r);
  };
  f();
  EXPECT_NEAR(
      out[0],
      0.5 * x[0] * (1 + std::tanh(std::sqrt(2 / M_PI) * (x[0] + 0.044715 * std::pow(x[0], 3)))),
      1e-12);
  Vec dx(n, 0);
  GeluBackward(dx.data(), x.data(), r.data(), n);
  CheckGrad("dx", x, dx, f);
}

TEST(ModelGradcheck, Residual) {
  std::mt19937_64 rng(5);
  const int n = 20;
  Vec a = Random(n, rng), b = Random(n, rng), r = Random(n, rng), out(n);
  auto f = [&] {
    ResidualForward(out.data(), a.data(), b.data(), n);
    return Dot(out, r);
  };
  Vec da(n, 0), db(n, 0);
  ResidualBackward(da.data(), db.data(), r.data(), n);
  CheckGrad("da", a, da, f);
  CheckGrad("db", b, db, f);
}

TEST(ModelGradcheck, SoftmaxCrossEntropy) {
  std::mt19937_64 rng(6);
  const int N = 4, V = 9;
  Vec logits = Random(N * V, rng, 3.0), probs(N * V), losses(N);
  std::vector<int32_t> targets = {0, 8, 3, 3};
  auto f = [&] {
    return CrossEntropyForward(probs.data(), losses.data(), logits.data(), targets.data(), N, V);
  };
  const double loss = f();
  double ref = 0;
  for (int i = 0; i < N; ++i) {
    double z = 0;
    for (int j = 0; j < V; ++j) z += std::exp(logits[i * V + j]);
    ref += -(logits[i * V + targets[i]] - std::log(z)) / N;
  }
  EXPECT_NEAR(loss, ref, 1e-12);
  Vec dl(N * V, 0);
  CrossEntropyBackward(dl.data(), probs.data(), targets.data(), N, V, 1.0 / N);
  CheckGrad("dlogits", logits, dl, f);
}

TEST(ModelGradcheck, Embeddings) {
  std::mt19937_64 rng(7);
  const int B = 2, T = 3, C = 4, V = 5;
  Vec wte = Random(V * C, rng), wpe = Random(T * C, rng), r = Random(B * T * C, rng);
  std::vector<int32_t> inp = {1, 4, 1, 0, 2, 1};  // a repeated token sums its gradients
  Vec out(B * T * C);
  auto f = [&] {
    EncoderForward(out.data(), inp.data(), wte.data(), wpe.data(), B, T, C);
    return Dot(out, r);
  };
  Vec dwte(V * C, 0), dwpe(T * C, 0);
  EncoderBackward(dwte.data(), dwpe.data(), r.data(), inp.data(), B, T, C);
  CheckGrad("dwte", wte, dwte, f);
  CheckGrad("dwpe", wpe, dwpe, f);
}

// The whole model, every tensor: LM head tied to wte, residual stream, all layers.
TEST(ModelGradcheck, WholeModel) {
  const GptConfig c{.vocab = 11, .context = 6, .layers = 2, .heads = 2, .width = 8};
  const int B = 2, T = 5;
  auto g = Gpt<double>::Create(c, B, T);
  ASSERT_TRUE(g.ok()) << g.status();
  Gpt<double>& gpt = **g;
  std::mt19937_64 rng(8);
  Vec p = Random(gpt.params().size(), rng, 0.3);
  std::copy(p.begin(), p.end(), gpt.params().begin());
  std::vector<int32_t> in(B * T), tg(B * T);
  for (int i = 0; i < B * T; ++i) {
    in[i] = static_cast<int32_t>(rng() % c.vocab);
    tg[i] = static_cast<int32_t>(rng() % c.vocab);
  }
  gpt.Forward(in.data(), tg.data());
  gpt.Backward();
  Vec grad(gpt.grads().begin(), gpt.grads().end());
  Vec x(gpt.params().begin(), gpt.params().end());
  auto f = [&] {
    std::copy(x.begin(), x.end(), gpt.params().begin());
    return gpt.Forward(in.data(), tg.data());
  };
  CheckGrad("params", x, grad, f);
  // Every tensor has a non-zero gradient somewhere (no layer silently disconnected).
  for (const TensorSpec& t : gpt.layout().manifest.tensors()) {
    double s = 0;
    for (uint64_t i = 0; i < t.numel(); ++i) s += std::abs(grad[t.offset + i]);
    EXPECT_GT(s, 0.0) << t.name;
  }
}

// The float model (what trains) agrees with the double one.
TEST(ModelGradcheck, FloatMatchesDouble) {
  const GptConfig c{.vocab = 32, .context = 16, .layers = 2, .heads = 4, .width = 32};
  const int B = 3, T = 16;
  auto gd = Gpt<double>::Create(c, B, T);
  auto gf = Gpt<float>::Create(c, B, T);
  ASSERT_TRUE(gd.ok() && gf.ok());
  std::mt19937_64 rng(9);
  Vec p = Random((*gd)->params().size(), rng, 0.1);
  std::copy(p.begin(), p.end(), (*gd)->params().begin());
  for (size_t i = 0; i < p.size(); ++i) (*gf)->params()[i] = static_cast<float>(p[i]);
  std::vector<int32_t> in(B * T), tg(B * T);
  for (int i = 0; i < B * T; ++i) {
    in[i] = static_cast<int32_t>(rng() % c.vocab);
    tg[i] = static_cast<int32_t>(rng() % c.vocab);
  }
  const double ld = (*gd)->Forward(in.data(), tg.data());
  const double lf = (*gf)->Forward(in.data(), tg.data());
  EXPECT_NEAR(lf, ld, 1e-5 * ld);
  (*gd)->Backward();
  (*gf)->Backward();
  double num = 0, den = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    const double d = (*gf)->grads()[i] - (*gd)->grads()[i];
    num += d * d;
    den += (*gd)->grads()[i] * (*gd)->grads()[i];
  }
  EXPECT_LT(std::sqrt(num / den), 1e-5);
}

}  // namespace
}  // namespace diloco::model
