// The shard's push guard (server/push_guard.h) on whole rounds: a fleet of three workers pushes
// normal rounds of a fragment, then one push claims 50x the steps and tokens, or carries 50x the
// norm. With the guard its share of the round, and the round's own move of theta, stay within
// what the cap allows (derived below); without it (caps 0, the shard before the guard) they do
// not. Pushes within the caps are merged exactly as without the guard.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/server/shard_harness.h"

namespace diloco::server::testing {
namespace {

using wire::MsgType;

constexpr int kWorkers = 3;
constexpr int kNormalRounds = 3;  // 9 pushes: the caps are armed (8 samples) for round 4
constexpr double kUnit = 0.1;     // a normal push's value per element
constexpr double kCap = 4;        // ShardOptions' push_steps_cap and push_norm_cap

// One worker's push: the delta is `a` on the first half of the fragment, `b` on the second.
struct Claim {
  float a = 0, b = 0;
  uint64_t tokens = 100;
  uint32_t steps = 10;  // H
};

// A shard with workers 1..3 on fragment 0 (theta(0) = 1), rounds of one push each.
class Fleet {
 public:
  explicit Fleet(ShardOptions o) : h_(Options(std::move(o))) {
    n_ = h_.fragment(0).numel;
    half_ = n_ / 2;
    for (int w = 1; w <= kWorkers; ++w) h_.Hello(absl::StrCat("w", w), w);
    h_.Init("w1", 1, 0, std::vector<float>(n_, 1.0f));
  }

  // One round: every worker pushes its claim, the round closes (every live worker pushed).
  void Round(const std::array<Claim, kWorkers>& claims) {
    ++round_;
    for (int w = 1; w <= kWorkers; ++w) {
      const Claim& c = claims[w - 1];
      const auto ack = h_.Push(absl::StrCat("w", w), w, 0, /*seq=*/round_, /*base=*/round_,
                               Delta(c.a, c.b), c.tokens, c.steps, codec_);
      ASSERT_EQ(Only(ack, MsgType::PushAck)->header.ack, wire::AckStatus::Queued);
    }
    ASSERT_EQ(h_.Tick().size(), static_cast<size_t>(kWorkers));
    ASSERT_EQ(h_.shard().published_version(0), round_ + 1);
  }
  void NormalRounds(int n) {
    for (int r = 0; r < n; ++r) Round({Claim{kUnit, 0}, Claim{kUnit, 0}, Claim{kUnit, 0}});
  }

  std::vector<float> Delta(float a, float b) const {
    std::vector<float> d(n_, 0.0f);  // an odd last element stays 0 in every push
    for (uint64_t i = 0; i < 2 * half_; ++i) d[i] = i < half_ ? a : b;
    return d;
  }

  ShardHarness& h() { return h_; }
  uint64_t half() const { return half_; }
  void set_codec(kernels::Codec c) { codec_ = c; }

 private:
  static ShardOptions Options(ShardOptions o) {
    o.round.quorum = kWorkers;
    return o;
  }
  ShardHarness h_;
  uint64_t n_ = 0, half_ = 0, round_ = 0;
  kernels::Codec codec_ = wire::kFragmentCodec;
};

// What the last round did: its merged delta D, read back from theta through the Nesterov step
// (share 1: every live worker pushed). Theta moves by lr ((1 + mu) D + mu^2 m) with m the
// momentum before the round; the normal rounds before it merged kUnit on the first half, so
// there m = kUnit (1 + mu + ... + mu^(k-1)) and 0 on the second half.
struct LastRound {
  double a = 0, b = 0;  // D on each half (mean per element)
  double own_move = 0;  // || lr (1 + mu) D ||: the round's move beyond the momentum's
  double move_b = 0;    // theta's move on the second half (no momentum there): its part of it
  double share = 0;     // b / (a + b): the second half's part of the merged delta
};

LastRound Measure(Fleet& f, const std::vector<float>& before, const ShardOptions& o) {
  const double lr = o.outer.lr, mu = o.outer.mu;
  double m = 0;
  for (int r = 0; r < kNormalRounds; ++r) m = mu * m + kUnit;
  const std::vector<float> after = f.h().shard().params(0);
  LastRound l;
  double sq = 0;
  for (uint64_t i = 0; i < 2 * f.half(); ++i) {
    const double mi = i < f.half() ? m : 0;
    const double moved = static_cast<double>(before[i]) - after[i];  // = lr((1+mu)D + mu^2 m)
    const double own = moved - lr * mu * mu * mi;
    const double d = own / (lr * (1 + mu));
    (i < f.half() ? l.a : l.b) += d / static_cast<double>(f.half());
    sq += own * own;
    if (i >= f.half()) l.move_b += own * own;
  }
  l.own_move = std::sqrt(sq);
  l.move_b = std::sqrt(l.move_b);
  l.share = l.b / (l.a + l.b);
  return l;
}

ShardOptions GuardOptions(bool guard, MergeRule merge = MergeRule::kWeightedMean) {
  ShardOptions o = TinyOptions();
  o.merge = merge;
  if (!guard) o.push_steps_cap = o.push_norm_cap = 0;
  return o;
}

// A fleet's normal rounds, then one in which worker 3 pushes `odd`.
struct OddRound {
  std::unique_ptr<Fleet> fleet;
  LastRound last;
};
OddRound RunOddRound(const ShardOptions& o, Claim odd,
                     kernels::Codec codec = wire::kFragmentCodec) {
  OddRound r{std::make_unique<Fleet>(o), {}};
  r.fleet->set_codec(codec);
  r.fleet->NormalRounds(kNormalRounds);
  const std::vector<float> before = r.fleet->h().shard().params(0);
  r.fleet->Round({Claim{kUnit, 0}, Claim{kUnit, 0}, odd});
  r.last = Measure(*r.fleet, before, o);
  return r;
}

// (a) One push claims 50x H steps and 50x the tokens (weight tokens^2/steps: 50x a normal
// push's), its delta of a normal size but along the second half. Capped, it weighs as cap x
// median = 40 steps with tokens scaled alike: cap x a normal push's weight (its tokens per
// step are the fleet's), so its share of the merged direction is at most cap / (cap + 2); the
// second half's D is at most kUnit times that for the weighted mean, and for RDA (the mean
// norm along the mean unit direction) kUnit cap / sqrt(cap^2 + 2^2). Theta's move there is
// lr (1 + mu) sqrt(half) times that (the momentum is 0 on the second half).
const Claim kStepsClaim{0, kUnit, 50 * 100, 50 * 10};

struct WeightCapCase {
  MergeRule merge;
  double (*component_bound)(double cap);  // of the second half's D, in units of kUnit
};
constexpr double ShareBound(double cap) { return cap / (cap + 2); }
double MoveBound(const ShardOptions& o, const Fleet& f, double d) {
  return o.outer.lr * (1 + o.outer.mu) * std::sqrt(static_cast<double>(f.half())) * d;
}

class WeightCapTest : public ::testing::TestWithParam<WeightCapCase> {};

TEST_P(WeightCapTest, AHugeStepsClaimWeighsAtMostCapTimesTheMedian) {
  const ShardOptions o = GuardOptions(true, GetParam().merge);
  const auto [f, l] = RunOddRound(o, kStepsClaim);
  EXPECT_EQ(o.push_steps_cap, kCap);
  const double cap = kCap;
  EXPECT_LE(l.share, ShareBound(cap) + 1e-4) << "a " << l.a << " b " << l.b;
  EXPECT_NEAR(l.share, ShareBound(cap), 1e-3);  // at the cap exactly
  const double bound_b = kUnit * GetParam().component_bound(cap);
  EXPECT_LE(l.b, bound_b * (1 + 1e-4));
  EXPECT_LE(l.move_b, MoveBound(o, *f, bound_b) * (1 + 1e-4));
  const auto& c = f->h().shard().counters();
  EXPECT_EQ(c.pushes_weight_capped, 1u);
  EXPECT_EQ(c.pushes_norm_clipped, 0u);
  bool logged = false;
  for (const std::string& line : f->h().shard().TakeLogLines())
    logged |= line.find(
                  "weight capped: worker 3 (fragment 0, seq 4) claims 500 steps and 5000 "
                  "tokens, over 4 x the median 10 steps") != std::string::npos;
  EXPECT_TRUE(logged);
  EXPECT_NE(f->h().shard().StatsJson().find("\"pushes_weight_capped\":1"), std::string::npos);
}

// The shard before the guard (caps 0): the same push takes 50/52 of the round's direction.
TEST_P(WeightCapTest, WithoutTheCapTheClaimDominatesTheRound) {
  const ShardOptions o = GuardOptions(false, GetParam().merge);
  const auto [f, l] = RunOddRound(o, kStepsClaim);
  EXPECT_NEAR(l.share, 50.0 / 52.0, 1e-3);
  const double bound_b = kUnit * GetParam().component_bound(kCap);
  EXPECT_GT(l.move_b, MoveBound(o, *f, bound_b) * 1.05);
  EXPECT_EQ(f->h().shard().counters().pushes_weight_capped, 0u);
}

INSTANTIATE_TEST_SUITE_P(
    Merges, WeightCapTest,
    ::testing::Values(
        WeightCapCase{MergeRule::kWeightedMean, [](double cap) { return ShareBound(cap); }},
        WeightCapCase{MergeRule::kRda, [](double cap) { return cap / std::hypot(cap, 2.0); }}),
    [](const auto& info) {
      return std::string(info.param.merge == MergeRule::kRda ? "Rda" : "WeightedMean");
    });

// (b) One push's delta has 50x a normal push's norm (50 kUnit on the second half). Clipped to
// cap x the median norm, the round's merged delta has a norm of at most (2 + cap) / 3 x a
// normal push's: the mean of the three norms bounds the weighted mean's (triangle inequality)
// and is RDA's exactly. The round's own move is lr (1 + mu) times that.
const Claim kNormPush{0, 50 * kUnit};

struct NormCase {
  MergeRule merge;
  const char* codec;
};

double NormMoveBound(const ShardOptions& o, const Fleet& f, double cap) {
  return MoveBound(o, f, (2 + cap) / 3 * kUnit);
}

class NormClipTest : public ::testing::TestWithParam<NormCase> {};

TEST_P(NormClipTest, AHugeDeltaMovesThetaAtMostAsACappedOne) {
  const ShardOptions o = GuardOptions(true, GetParam().merge);
  const auto [f, l] = RunOddRound(o, kNormPush, *kernels::ParseCodec(GetParam().codec));
  EXPECT_EQ(o.push_norm_cap, kCap);
  EXPECT_LE(l.own_move, NormMoveBound(o, *f, kCap) * 1.01)  // 1%: quantization
      << "a " << l.a << " b " << l.b;
  const auto& c = f->h().shard().counters();
  EXPECT_EQ(c.pushes_norm_clipped, 1u);
  EXPECT_EQ(c.pushes_weight_capped, 0u);
  bool logged = false;
  for (const std::string& line : f->h().shard().TakeLogLines())
    logged |= line.find("norm clipped: worker 3 (fragment 0, seq 4)") != std::string::npos;
  EXPECT_TRUE(logged);
  EXPECT_NE(f->h().shard().StatsJson().find("\"pushes_norm_clipped\":1"), std::string::npos);
}

// The shard before the guard (caps 0): the round moves theta ~8x as far as the bound.
TEST_P(NormClipTest, WithoutTheCapTheDeltaDrivesTheRound) {
  const ShardOptions o = GuardOptions(false, GetParam().merge);
  const auto [f, l] = RunOddRound(o, kNormPush, *kernels::ParseCodec(GetParam().codec));
  EXPECT_GT(l.own_move, 5 * NormMoveBound(o, *f, kCap));
  EXPECT_EQ(f->h().shard().counters().pushes_norm_clipped, 0u);
}

INSTANTIATE_TEST_SUITE_P(MergesAndCodecs, NormClipTest,
                         ::testing::Values(NormCase{MergeRule::kWeightedMean, "fp32"},
                                           NormCase{MergeRule::kWeightedMean, "bf16"},
                                           NormCase{MergeRule::kWeightedMean, "fp8"},
                                           NormCase{MergeRule::kWeightedMean, "int8"},
                                           NormCase{MergeRule::kWeightedMean, "int4"},
                                           NormCase{MergeRule::kRda, "fp32"},
                                           NormCase{MergeRule::kRda, "int4"}),
                         [](const auto& info) {
                           return absl::StrCat(
                               info.param.merge == MergeRule::kRda ? "Rda" : "WeightedMean", "_",
                               info.param.codec);
                         });

// Pushes within the caps (steps up to 3.5x the median, norms within 4x) are merged bit for bit
// as without the guard, on the apply threads too; nothing is counted or logged.
TEST(ShardGuardTest, PushesWithinTheCapsAreMergedAsWithoutTheGuard) {
  ShardOptions on = GuardOptions(true), off = GuardOptions(false);
  on.apply_threads = off.apply_threads = 2;
  Fleet g(on), plain(off);
  for (int r = 0; r < 10; ++r) {
    const float s = 1 + 0.1f * static_cast<float>(r % 4);
    const std::array<Claim, kWorkers> claims = {
        Claim{0.1f * s, 0.02f, 100, 10}, Claim{0.05f, 0.2f * s, 150, 12},
        Claim{0.3f, 0.1f, r == 6 ? 350u : 70u, r == 6 ? 35u : 8u}};
    g.Round(claims);
    plain.Round(claims);
  }
  EXPECT_EQ(g.h().shard().params(0), plain.h().shard().params(0));
  EXPECT_EQ(g.h().shard().counters().pushes_weight_capped, 0u);
  EXPECT_EQ(g.h().shard().counters().pushes_norm_clipped, 0u);
  EXPECT_TRUE(g.h().shard().TakeLogLines().empty());
}

TEST(ShardGuardTest, ACapBelowOneIsRefused) {
  for (double cap : {0.5, -1.0, std::nan("")}) {
    ShardOptions o = TinyOptions();
    o.push_norm_cap = cap;
    FakeClock clock;
    EXPECT_FALSE(Shard::Create(o, &clock).ok()) << cap;
    o.push_norm_cap = 4;
    o.push_steps_cap = cap;
    EXPECT_FALSE(Shard::Create(o, &clock).ok()) << cap;
  }
}

}  // namespace
}  // namespace diloco::server::testing
