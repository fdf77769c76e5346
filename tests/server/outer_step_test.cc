// The outer steps (server/outer_step.h): each is the kernel it wraps, the composed step's phase
// is its own, a round stepped in parts (as Shard::StepRound steps a theta still being sent) is
// the whole step bit for bit, and only Delayed Nesterov closes a round per arrival.
#include "server/outer_step.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/outer.h"

namespace diloco::server {
namespace {

constexpr uint64_t kN = 1000;
constexpr kernels::NesterovParams kP{0.7f, 0.9f};

std::vector<float> Random(uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist;
  std::vector<float> v(kN);
  for (float& x : v) x = dist(rng);
  return v;
}

// Bit for bit, so that a NaN or a last-bit difference both fail.
bool Same(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(OuterStepTest, EachRoundStepIsTheKernelItWraps) {
  const std::vector<double> shares = {0.25, 1.0, 0.4, 0.5, 0.7};  // the composed phase crosses 1
  for (RoundStep kind : {RoundStep::kFull, RoundStep::kPartial, RoundStep::kComposed}) {
    auto outer = MakeOuterStep(OuterMode::kRounds, kind, kP, 4, kN);
    std::vector<float> theta = Random(1), m = Random(2);
    std::vector<float> want_theta = theta, want_m = m;
    double phase = 0;
    for (size_t r = 0; r < shares.size(); ++r) {
      const std::vector<float> d = Random(10 + r);
      outer->Step(shares[r], theta, m, d);
      if (kind == RoundStep::kFull) {
        kernels::NesterovStep(kP, want_theta, want_m, d);
      } else if (kind == RoundStep::kPartial) {
        ASSERT_TRUE(kernels::PartialNesterovStep(kP, shares[r], want_theta, want_m, d).ok());
      } else {
        ASSERT_TRUE(
            kernels::ComposedNesterovStep(kP, shares[r], &phase, want_theta, want_m, d).ok());
      }
      EXPECT_TRUE(Same(theta, want_theta)) << static_cast<int>(kind) << " round " << r;
      EXPECT_TRUE(Same(m, want_m)) << static_cast<int>(kind) << " round " << r;
    }
  }
}

TEST(OuterStepTest, DelayedNesterovIsTheKernelArrivalByArrival) {
  // The round step is ignored: Delayed Nesterov has no rounds.
  auto outer = MakeOuterStep(OuterMode::kDelayedNesterov, RoundStep::kComposed, kP, 3, kN);
  kernels::DelayedNesterov dn(kP, 3, kN);
  std::vector<float> theta = Random(1), m = Random(2);
  std::vector<float> want_theta = theta, want_m = m;
  for (uint32_t a = 0; a < 7; ++a) {  // past two momentum updates
    const std::vector<float> g = Random(10 + a);
    outer->Step(/*share=*/0.5, theta, m, g);
    ASSERT_TRUE(dn.Arrive(want_theta, want_m, g).ok());
    EXPECT_TRUE(Same(theta, want_theta)) << "arrival " << a;
    EXPECT_TRUE(Same(m, want_m)) << "arrival " << a;
  }
}

TEST(OuterStepTest, ARoundSteppedInPartsIsTheWholeStepBitForBit) {
  // Parts of uneven size, round after round: every part steps from the phase the round found and
  // Commit advances it once (advanced per part, the composed step's later parts would differ).
  const std::vector<size_t> cuts = {0, 300, 301, 700, kN};
  const std::vector<double> shares = {0.3, 0.45, 0.6, 1.0, 0.2};
  for (RoundStep kind : {RoundStep::kComposed, RoundStep::kPartial, RoundStep::kFull}) {
    auto whole = MakeOuterStep(OuterMode::kRounds, kind, kP, 4, kN);
    auto parts = MakeOuterStep(OuterMode::kRounds, kind, kP, 4, kN);
    ASSERT_TRUE(parts->Splits());
    std::vector<float> theta = Random(1), m = Random(2);
    std::vector<float> part_theta = theta, part_m = m;
    for (size_t r = 0; r < shares.size(); ++r) {
      const std::vector<float> d = Random(10 + r);
      whole->Step(shares[r], theta, m, d);
      for (size_t k = 0; k + 1 < cuts.size(); ++k) {
        const size_t lo = cuts[k], n = cuts[k + 1] - lo;
        parts->StepPart(shares[r], std::span<float>(part_theta).subspan(lo, n),
                        std::span<float>(part_m).subspan(lo, n),
                        std::span<const float>(d).subspan(lo, n));
      }
      parts->Commit();
      EXPECT_TRUE(Same(part_theta, theta)) << static_cast<int>(kind) << " round " << r;
      EXPECT_TRUE(Same(part_m, m)) << static_cast<int>(kind) << " round " << r;
    }
  }
}

TEST(OuterStepTest, OnlyDelayedNesterovClosesARoundPerArrival) {
  for (RoundStep kind : {RoundStep::kPartial, RoundStep::kComposed, RoundStep::kFull}) {
    auto rounds = MakeOuterStep(OuterMode::kRounds, kind, kP, 4, kN);
    EXPECT_FALSE(rounds->PerArrival()) << static_cast<int>(kind);
    EXPECT_TRUE(rounds->Splits()) << static_cast<int>(kind);
    auto dn = MakeOuterStep(OuterMode::kDelayedNesterov, kind, kP, 4, kN);
    EXPECT_TRUE(dn->PerArrival()) << static_cast<int>(kind);
    EXPECT_FALSE(dn->Splits()) << "its kernel takes the fragment whole";
  }
}

}  // namespace
}  // namespace diloco::server
