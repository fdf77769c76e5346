// The push payload alone: chunk layout as the wire expects it, error feedback that carries what
// quantisation lost into the next push, its exact undo, and a diverged delta kept off the wire.
#include "worker/push_codec.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "common/checksum.h"

namespace diloco::worker {
namespace {

std::vector<float> Random(size_t n, uint64_t seed, float scale) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// More than one chunk, and a last chunk that is not whole.
constexpr size_t kNumel = 2 * 1048576 + 1000;

TEST(PushCodecTest, ChunksMatchTheWireLayoutAndTheirChecksums) {
  const auto codec = *kernels::ParseCodec("int8:256");
  std::vector<float> delta = Random(kNumel, 1, 1e-3f), error(kNumel, 0.0f);
  const EncodedPush p = EncodePush(codec, delta, error);
  const auto frames = wire::PayloadFrames(p.bytes, codec, kNumel);
  ASSERT_EQ(frames.size(), 3u);
  ASSERT_EQ(p.checksums.size(), frames.size());
  for (size_t i = 0; i < frames.size(); ++i)
    EXPECT_EQ(p.checksums[i], Checksum64(frames[i].data(), frames[i].size())) << "chunk " << i;
  EXPECT_EQ(frames[2].size(), kernels::EncodedSize(codec, 1000));
  EXPECT_FALSE(p.poisoned);
}

TEST(PushCodecTest, ErrorFeedbackKeepsWhatQuantisationLostAndUndoRestoresIt) {
  const auto codec = *kernels::ParseCodec("int4:128");
  const std::vector<float> delta = Random(kNumel, 2, 1e-3f);
  const std::vector<float> error0 = Random(kNumel, 3, 1e-5f);
  std::vector<float> error = error0;
  const EncodedPush p = EncodePush(codec, delta, error);
  // decoded + new error == old error + delta, element by element.
  std::vector<float> decoded(kNumel, 0.0f);
  const uint64_t chunk = wire::ChunkElements(codec.block);
  size_t pos = 0;
  for (uint64_t off = 0; off < kNumel; off += chunk) {
    const uint64_t n = std::min<uint64_t>(chunk, kNumel - off);
    const size_t size = kernels::EncodedSize(codec, n);
    ASSERT_TRUE(kernels::Decode(codec, std::span<const uint8_t>(p.bytes->data() + pos, size),
                                std::span<float>(decoded.data() + off, n))
                    .ok());
    pos += size;
  }
  double worst = 0, lost = 0;
  for (size_t i = 0; i < kNumel; ++i) {
    worst = std::max<double>(worst, std::fabs(decoded[i] + error[i] - (error0[i] + delta[i])));
    lost = std::max<double>(lost, std::fabs(error[i] - error0[i]));
  }
  EXPECT_LT(worst, 1e-8);
  EXPECT_GT(lost, 1e-6) << "int4 loses something: the error must have moved";
  UndoErrorFeedback(codec, delta, error, p);
  double back = 0;
  for (size_t i = 0; i < kNumel; ++i)
    back = std::max<double>(back, std::fabs(error[i] - error0[i]));
  EXPECT_LT(back, 1e-8);
}

// With decay b, a push encodes b x error + delta: what the payload and the new error hold
// together, and the undo gives the old error back. Top-k keeps most of it in the error.
TEST(PushCodecTest, DecayedErrorFeedbackFadesTheResidualAndUndoRestoresIt) {
  const auto codec = *kernels::ParseCodec("topk:0.05:256");
  constexpr size_t kN = 4096;
  constexpr float kDecay = 0.9f;
  const std::vector<float> delta = Random(kN, 4, 1e-3f);
  const std::vector<float> error0 = Random(kN, 5, 1e-3f);
  std::vector<float> error = error0;
  const EncodedPush p = EncodePush(codec, delta, error, kDecay);
  std::vector<float> decoded(kN, 0.0f);
  ASSERT_TRUE(kernels::Decode(codec, *p.bytes, decoded).ok());
  double worst = 0, kept = 0;
  for (size_t i = 0; i < kN; ++i) {
    worst =
        std::max<double>(worst, std::fabs(decoded[i] + error[i] - (kDecay * error0[i] + delta[i])));
    kept = std::max<double>(kept, std::fabs(decoded[i] + error[i] - (error0[i] + delta[i])));
  }
  EXPECT_LT(worst, 1e-8);
  EXPECT_GT(kept, 1e-5) << "a tenth of the old residual must be gone";
  UndoErrorFeedback(codec, delta, error, p, kDecay);
  double back = 0;
  for (size_t i = 0; i < kN; ++i) back = std::max<double>(back, std::fabs(error[i] - error0[i]));
  EXPECT_LT(back, 1e-8);
}

// --ef_decay left at 0: top-k pushes decay their residual, the dense codecs keep it whole; a
// decay given applies to every codec.
TEST(PushCodecTest, TheResidualsDecayFollowsTheCodecUnlessGiven) {
  const auto topk = *kernels::ParseCodec("topk:0.05"), int8 = *kernels::ParseCodec("int8");
  EXPECT_EQ(EfDecayFor(topk, 0), kTopKEfDecay);
  EXPECT_LT(kTopKEfDecay, 1.0f);
  EXPECT_EQ(EfDecayFor(int8, 0), 1.0f);
  EXPECT_EQ(EfDecayFor(*kernels::ParseCodec("int4"), 0), 1.0f);
  EXPECT_EQ(EfDecayFor(topk, 1.0f), 1.0f);
  EXPECT_EQ(EfDecayFor(int8, 0.6f), 0.6f);
}

TEST(PushCodecTest, ANonFiniteChunkIsSentAsZerosAndItsErrorReset) {
  const auto codec = *kernels::ParseCodec("int8:256");
  std::vector<float> delta = Random(kNumel, 4, 1e-3f), error(kNumel, 1e-4f);
  delta[1048576 + 5] = std::numeric_limits<float>::quiet_NaN();  // in the second chunk
  const EncodedPush p = EncodePush(codec, delta, error);
  EXPECT_TRUE(p.poisoned);
  EXPECT_EQ(p.poisoned_chunks, 1u);
  const auto frames = wire::PayloadFrames(p.bytes, codec, kNumel);
  const auto* second = static_cast<const uint8_t*>(frames[1].data());
  EXPECT_TRUE(std::all_of(second, second + frames[1].size(), [](uint8_t b) { return b == 0; }));
  for (size_t i = 1048576; i < 2 * 1048576; ++i) ASSERT_EQ(error[i], 0.0f) << i;
  EXPECT_NE(error[0], 1e-4f) << "the healthy first chunk keeps its error feedback";
  std::vector<float> before = error;
  UndoErrorFeedback(codec, delta, error, p);  // nothing to undo for a poisoned push
  EXPECT_EQ(error, before);
}

TEST(PushCodecTest, AnFp32PushNeedsNoResidualAndSendsTheSameBytes) {
  const auto codec = *kernels::ParseCodec("fp32");
  std::vector<float> delta = Random(kNumel, 5, 1e-3f), zeros(kNumel, 0.0f);
  const EncodedPush with = EncodePush(codec, delta, zeros);
  EXPECT_TRUE(std::all_of(zeros.begin(), zeros.end(), [](float e) { return e == 0.0f; }))
      << "fp32 is exact: a zero residual stays zero, so it need not be held";
  const EncodedPush without = EncodePush(codec, delta, {});
  ASSERT_FALSE(without.poisoned);
  EXPECT_EQ(*without.bytes, *with.bytes);
  EXPECT_EQ(without.checksums, with.checksums);
  UndoErrorFeedback(codec, delta, {}, without);  // nothing to undo, nothing to touch

  delta[3] = std::numeric_limits<float>::infinity();  // the first chunk diverged
  const EncodedPush poisoned = EncodePush(codec, delta, {});
  EXPECT_TRUE(poisoned.poisoned);
  EXPECT_EQ(poisoned.poisoned_chunks, 1u);
  const auto frames = wire::PayloadFrames(poisoned.bytes, codec, kNumel);
  const auto* first = static_cast<const uint8_t*>(frames[0].data());
  EXPECT_TRUE(std::all_of(first, first + frames[0].size(), [](uint8_t b) { return b == 0; }));
}

}  // namespace
}  // namespace diloco::worker
