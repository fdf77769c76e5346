// The push guard's parts (server/push_guard.h): the median cap arms after enough samples, caps
// at cap x the median and records the capped value; the weight factor is what scaling a push's
// steps and tokens does to each weight rule; the guarded decode measures a push's norm in every
// codec and merges a delta over the cap scaled down to it, and leaves the others as they are.
#include "server/push_guard.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/codec.h"
#include "tests/server/shard_harness.h"

namespace diloco::server::testing {
namespace {

TEST(MedianCapTest, OffCapsNothing) {
  MedianCap cap(0);
  for (int i = 0; i < 20; ++i) EXPECT_FALSE(cap.Admit(10).capped);
  const auto a = cap.Admit(1e9);
  EXPECT_FALSE(a.capped);
  EXPECT_EQ(a.value, 1e9);
  EXPECT_EQ(cap.samples(), 0u);
}

TEST(MedianCapTest, ArmsOnceItHoldsEnoughSamples) {
  MedianCap cap(4);
  for (size_t i = 0; i + 1 < MedianCap::kMinSamples; ++i) cap.Admit(10);
  const auto early = cap.Admit(1000);  // 7 samples known: not armed, recorded as claimed
  EXPECT_FALSE(early.capped);
  EXPECT_EQ(early.value, 1000);
  EXPECT_EQ(early.limit, 0);
  const auto late = cap.Admit(1000);  // 8 known, median 10: capped at 40
  EXPECT_TRUE(late.capped);
  EXPECT_EQ(late.value, 40);
  EXPECT_EQ(late.limit, 40);
  const auto within = cap.Admit(40);  // at the cap: not capped
  EXPECT_FALSE(within.capped);
  EXPECT_EQ(within.value, 40);
}

TEST(MedianCapTest, ACappedWorkerCannotDragTheMedianUp) {
  MedianCap cap(4);
  for (size_t i = 0; i < MedianCap::kMinSamples; ++i) cap.Admit(10);
  // Two workers at 10, one claiming 100x: each of its claims is recorded as 40, the median
  // stays 10 and every claim is capped at 40.
  for (int round = 0; round < 40; ++round) {
    cap.Admit(10);
    cap.Admit(10);
    const auto a = cap.Admit(1000);
    ASSERT_TRUE(a.capped) << round;
    ASSERT_EQ(a.value, 40) << round;
  }
  EXPECT_EQ(cap.Median(), 10);
  EXPECT_EQ(cap.samples(), MedianCap::kWindow);
}

TEST(MedianCapTest, FollowsTheFleetWithinTheCap) {
  MedianCap cap(4);
  for (size_t i = 0; i < MedianCap::kWindow; ++i) cap.Admit(10);
  for (size_t i = 0; i < MedianCap::kWindow; ++i) EXPECT_FALSE(cap.Admit(30).capped);
  EXPECT_EQ(cap.Median(), 30);  // the window rolled over: 30s only
  EXPECT_EQ(cap.Admit(130).value, 120);
}

TEST(MedianCapTest, AMedianOfZeroCapsNothing) {
  MedianCap cap(4);
  for (size_t i = 0; i < MedianCap::kMinSamples; ++i) cap.Admit(0);
  EXPECT_FALSE(cap.Admit(5).capped);
}

TEST(CappedWeightFactorTest, IsScalingStepsAndTokensAlike) {
  const double r = 40.0 / 500.0;  // 500 steps and 5000 tokens weighed as 40 steps, 400 tokens
  EXPECT_NEAR(PushWeight(WeightScheme::kTokensSqOverSteps, 5000, 500, 0, 0) *
                  CappedWeightFactor(WeightScheme::kTokensSqOverSteps, r),
              PushWeight(WeightScheme::kTokensSqOverSteps, 400, 40, 0, 0), 1e-6);
  EXPECT_NEAR(PushWeight(WeightScheme::kTokens, 5000, 500, 0, 0) *
                  CappedWeightFactor(WeightScheme::kTokens, r),
              PushWeight(WeightScheme::kTokens, 400, 40, 0, 0), 1e-6);
  EXPECT_EQ(CappedWeightFactor(WeightScheme::kUniform, r), 1.0);
}

// A push of `values` in `codec`, as the shard receives it (one message, every chunk).
wire::Message PushMessage(kernels::Codec codec, const std::vector<float>& values) {
  wire::HeaderFields h;
  h.type = wire::MsgType::Push;
  h.tokens = 1;
  h.steps = 1;
  wire::SetPayloadLayout(h, codec, values.size());
  auto m = wire::ParseMessage(ShardHarness::Frames(h, ShardHarness::Encode(codec, values)));
  EXPECT_TRUE(m.ok()) << m.status();
  return *std::move(m);
}

// What the shard's decode gives for `m` without a guard.
std::vector<float> Decoded(kernels::Codec codec, const wire::Message& m, uint64_t numel) {
  std::vector<float> out(numel);
  for (const wire::PayloadChunk& c : wire::PayloadLayout(codec, numel))
    EXPECT_TRUE(
        kernels::Decode(codec, m.payload(c.index), std::span<float>(out).subspan(c.offset, c.count))
            .ok());
  return out;
}

double Norm(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += static_cast<double>(v) * v;
  return std::sqrt(s);
}

class GuardedDecodeTest : public ::testing::TestWithParam<const char*> {};

// Over two chunks, in every codec: the norm is the decoded delta's; armed below it, the delta
// is merged scaled to the cap (written over, or added with its weight); not armed, it is merged
// exactly as the unguarded decode merges it.
TEST_P(GuardedDecodeTest, MeasuresTheDecodedNormAndClipsToTheCap) {
  const kernels::Codec codec = *kernels::ParseCodec(GetParam());
  const uint64_t n = wire::ChunkElements(codec.block) + 1000;
  std::vector<float> x(n);
  for (uint64_t i = 0; i < n; ++i) x[i] = 0.01f * std::sin(0.001f * static_cast<float>(i) + 1);
  const wire::Message m = PushMessage(codec, x);
  const std::vector<float> ref = Decoded(codec, m, n);
  const double norm = Norm(ref);
  std::vector<float> scratch;

  MedianCap armed(4);  // median norm / 10: the cap is 0.4 x this push's norm
  for (size_t i = 0; i < MedianCap::kMinSamples; ++i) armed.Admit(norm / 10);
  std::vector<float> out(n, 7.0f);
  const GuardedDecode over =
      DecodeGuarded(codec, m, n, {out.data(), 1.0f, /*overwrite=*/true}, &armed, scratch);
  EXPECT_TRUE(over.ok);
  EXPECT_NEAR(over.norm, norm, 1e-9 * norm);
  ASSERT_TRUE(over.admitted.capped);
  EXPECT_NEAR(over.admitted.value, 0.4 * norm, 1e-9 * norm);
  for (uint64_t i = 0; i < n; i += 997) ASSERT_NEAR(out[i], 0.4 * ref[i], 1e-6 * 0.01) << i;
  EXPECT_NEAR(Norm(out), 0.4 * norm, 1e-5 * norm);

  std::vector<float> acc(n, 1.0f);
  const GuardedDecode add =
      DecodeGuarded(codec, m, n, {acc.data(), 0.5f, /*overwrite=*/false}, &armed, scratch);
  ASSERT_TRUE(add.admitted.capped);
  for (uint64_t i = 0; i < n; i += 997) ASSERT_NEAR(acc[i], 1 + 0.5 * 0.4 * ref[i], 1e-6) << i;

  MedianCap unarmed(4);  // no samples yet: merged as sent, bit for bit
  std::vector<float> plain(n, 1.0f), guarded(n, 1.0f);
  for (const wire::PayloadChunk& c : wire::PayloadLayout(codec, n))
    ASSERT_TRUE(kernels::DecodeAccumulate(codec, m.payload(c.index), 0.5f,
                                          std::span<float>(plain).subspan(c.offset, c.count))
                    .ok());
  const GuardedDecode as_sent =
      DecodeGuarded(codec, m, n, {guarded.data(), 0.5f, false}, &unarmed, scratch);
  EXPECT_FALSE(as_sent.admitted.capped);
  EXPECT_NEAR(as_sent.norm, norm, 1e-9 * norm);
  EXPECT_EQ(guarded, plain);
  EXPECT_EQ(unarmed.samples(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Codecs, GuardedDecodeTest,
                         ::testing::Values("fp32", "bf16", "fp8", "int8", "int4", "int4:64",
                                           "topk:0.02", "topk:0.3:64"));

}  // namespace
}  // namespace diloco::server::testing
