// The top-k codecs (kernels/topk.h): they keep exactly the k largest magnitudes of each block
// (ties to the lower index), the fast path writes the reference's bytes, error feedback keeps
// what was not sent, the index form switches between packed, Elias-Fano (topk only) and bitmap
// where the bits say, and the encoded size is exactly EncodedSize.
#include "kernels/topk.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <vector>

#include "kernels/codec.h"
#include "kernels/reference.h"
#include "tests/kernels/test_data.h"

namespace diloco::kernels {
namespace {

using testing::Bits;

Codec TopK(uint32_t k, uint32_t block, CodecKind kind = CodecKind::kTopK) {
  return Codec{kind, block, k};
}
constexpr CodecKind kKinds[] = {CodecKind::kTopK, CodecKind::kTopKPacked};

// The kept set by brute force: indices of the kb largest |x| of each block, lower index first
// among equal magnitudes.
std::set<size_t> ExpectedKept(Codec c, const std::vector<float>& x) {
  std::set<size_t> kept;
  for (size_t lo = 0; lo < x.size(); lo += c.block) {
    const size_t len = std::min<size_t>(c.block, x.size() - lo);
    std::vector<size_t> order(len);
    std::iota(order.begin(), order.end(), lo);
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t i, size_t j) { return std::fabs(x[i]) > std::fabs(x[j]); });
    for (size_t j = 0; j < TopKCount(c, len); ++j) kept.insert(order[j]);
  }
  return kept;
}

std::vector<float> RoundTrip(Codec c, const std::vector<float>& x) {
  std::vector<uint8_t> enc(EncodedSize(c, x.size()));
  EXPECT_TRUE(Encode(c, x, enc).ok());
  std::vector<float> y(x.size(), 7.0f);
  EXPECT_TRUE(Decode(c, enc, y).ok());
  return y;
}

struct Config {
  uint32_t k, block;
  size_t n;
};
// Every index form of both kinds (packed: k 1 and 3; Elias-Fano in topk, packed in topk-packed:
// k 41, 21, 11, 88; bitmap: 300 in topk-packed, 600 and 64 of 64 in both), a short last block,
// a block of 1000 (not a power of two).
const Config kConfigs[] = {{41, 2048, 2048 * 3 + 100},
                           {21, 1024, 5000},
                           {1, 64, 64},
                           {3, 2048, 2048 + 1500},
                           {11, 64, 64 * 5 + 7},
                           {88, 2048, 2048 * 2 + 77},
                           {300, 2048, 4096},
                           {600, 2048, 4096 + 2},
                           {100, 1000, 2999},
                           {64, 64, 130},
                           {41, 2048, 300007}};  // the last: several threads

TEST(TopK, KeepsExactlyTheLargestMagnitudes) {
  for (const CodecKind kind : kKinds)
    for (const Config& cf : kConfigs) {
      const Codec c = TopK(cf.k, cf.block, kind);
      SCOPED_TRACE(CodecName(c));
      const std::vector<float> x = testing::Gaussian(cf.n, cf.k + cf.block);
      const std::vector<float> y = RoundTrip(c, x);
      const std::set<size_t> want = ExpectedKept(c, x);
      for (size_t i = 0; i < x.size(); ++i) {
        if (want.count(i)) {
          ASSERT_NE(y[i], 0.0f) << i;
          ASSERT_EQ(std::signbit(y[i]), std::signbit(x[i])) << i;
        } else {
          ASSERT_EQ(Bits(y[i]), Bits(0.0f)) << "not kept, yet sent: " << i;
        }
      }
    }
}

TEST(TopK, TiesGoToTheLowerIndex) {
  const Codec c = TopK(3, 64);
  std::vector<float> x(64, 0.5f);  // all equal: entries 0, 1, 2
  std::vector<float> y = RoundTrip(c, x);
  for (size_t i = 0; i < 64; ++i) EXPECT_EQ(y[i] != 0.0f, i < 3) << i;
  // One clear winner, then a tie among -2 at 40, 10, 50 for the last two places: 10 and 40.
  x.assign(64, 1.0f);
  x[7] = 3.0f;
  x[40] = -2.0f;
  x[10] = 2.0f;
  x[50] = -2.0f;
  y = RoundTrip(c, x);
  std::vector<size_t> sent;
  for (size_t i = 0; i < 64; ++i)
    if (y[i] != 0.0f) sent.push_back(i);
  EXPECT_EQ(sent, (std::vector<size_t>{7, 10, 40}));
  EXPECT_LT(y[40], 0.0f);
}

TEST(TopK, TwoMagnitudesAreTheMeansOfTheirHalves) {
  const Codec c = TopK(4, 64);
  std::vector<float> x(64, 0.01f);
  x[3] = 1.0f;  // low half of [1, 9] (mid 5): lo = mean(1, 3) = 2
  x[9] = -3.0f;
  x[20] = 9.0f;  // high half: hi = mean(7, 9) = 8
  x[30] = -7.0f;
  const std::vector<float> y = RoundTrip(c, x);
  EXPECT_EQ(y[3], 2.0f);
  EXPECT_EQ(y[9], -2.0f);
  EXPECT_EQ(y[20], 8.0f);
  EXPECT_EQ(y[30], -8.0f);
}

TEST(TopK, ZeroBlockSendsZeros) {
  const Codec c = TopK(5, 64);
  const std::vector<float> y = RoundTrip(c, std::vector<float>(100, 0.0f));
  for (float v : y) ASSERT_EQ(v, 0.0f);
}

TEST(TopK, FastEqualsReference) {
  for (const CodecKind kind : kKinds)
    for (const Config& cf : kConfigs) {
      const Codec c = TopK(cf.k, cf.block, kind);
      SCOPED_TRACE(CodecName(c));
      const std::vector<float> x = testing::BlockyData(cf.n, cf.block, 3);
      std::vector<uint8_t> fast(EncodedSize(c, cf.n)), slow(fast.size());
      ASSERT_TRUE(Encode(c, x, fast).ok());
      ASSERT_TRUE(ref::Encode(c, x, slow).ok());
      ASSERT_EQ(fast, slow);
      const std::vector<float> acc0 = testing::Gaussian(cf.n, 4);
      std::vector<float> a = acc0, b = acc0, dec(cf.n), ref_dec(cf.n);
      ASSERT_TRUE(DecodeAccumulate(c, fast, 0.37f, a).ok());
      ASSERT_TRUE(ref::DecodeAccumulate(c, fast, 0.37f, b).ok());
      ASSERT_TRUE(Decode(c, fast, dec).ok());
      ASSERT_TRUE(ref::Decode(c, fast, ref_dec).ok());
      for (size_t i = 0; i < cf.n; ++i) {
        ASSERT_EQ(Bits(a[i]), Bits(acc0[i] + 0.37f * dec[i])) << i;
        ASSERT_EQ(Bits(b[i]), Bits(a[i])) << i;
        ASSERT_EQ(Bits(ref_dec[i]), Bits(dec[i])) << i;
      }
      std::vector<float> ef = testing::Gaussian(cf.n, 5), ref_ef = ef;
      for (uint32_t round = 0; round < 3; ++round) {
        const std::vector<float> d = testing::Gaussian(cf.n, 10 + round);
        ASSERT_TRUE(ErrorFeedbackEncode(c, d, ef, fast).ok());
        ASSERT_TRUE(ref::ErrorFeedbackEncode(c, d, ref_ef, slow).ok());
        ASSERT_EQ(fast, slow);
        for (size_t i = 0; i < cf.n; ++i) ASSERT_EQ(Bits(ef[i]), Bits(ref_ef[i])) << i;
      }
    }
}

// sent + residual == delta + previous residual in every round, and over all rounds the sum of
// what was sent plus the last residual is the sum of the deltas.
TEST(TopK, ErrorFeedbackConservesTheDelta) {
  const Codec c = TopK(41, 2048);
  const size_t n = 2048 * 2 + 300;
  std::vector<float> err(n, 0.0f), sent(n);
  std::vector<double> sum_delta(n, 0.0), sum_sent(n, 0.0);
  std::vector<uint8_t> enc(EncodedSize(c, n));
  for (uint32_t round = 0; round < 50; ++round) {
    const std::vector<float> d = testing::Gaussian(n, 100 + round, 0.01f);
    const std::vector<float> prev = err;
    ASSERT_TRUE(ErrorFeedbackEncode(c, d, err, enc).ok());
    ASSERT_TRUE(Decode(c, enc, sent).ok());
    size_t nonzero = 0;
    for (size_t i = 0; i < n; ++i) {
      const float want = d[i] + prev[i];
      ASSERT_NEAR(sent[i] + err[i], want, 1e-6f * std::max(1.0f, std::fabs(want))) << i;
      if (sent[i] == 0.0f) {
        ASSERT_EQ(Bits(err[i]), Bits(want)) << "unsent stays whole: " << i;
      }
      nonzero += sent[i] != 0.0f;
      sum_delta[i] += d[i];
      sum_sent[i] += sent[i];
    }
    EXPECT_EQ(nonzero, 2 * 41 + TopKCount(c, 300));
  }
  for (size_t i = 0; i < n; ++i) ASSERT_NEAR(sum_sent[i] + err[i], sum_delta[i], 1e-5) << i;
}

// topk-packed: packed indices while k * ceil(log2(block)) < block, a bitmap from there on; the
// sizes are the documented ones and the encoder fills exactly that many bytes.
TEST(TopK, PackedIndexFormAtTheBoundary) {
  struct Case {
    uint32_t block, last_packed_k;
  };
  for (const Case& t : {Case{2048, 186}, Case{1024, 102}, Case{64, 10}, Case{1000, 99}}) {
    const uint32_t w = TopKIndexBits(t.block);
    const Codec packed = TopK(t.last_packed_k, t.block, CodecKind::kTopKPacked),
                bitmap = TopK(t.last_packed_k + 1, t.block, CodecKind::kTopKPacked);
    EXPECT_EQ(TopKIndexForm(packed), TopKForm::kPacked) << t.block;
    EXPECT_EQ(TopKIndexForm(bitmap), TopKForm::kBitmap) << t.block;
    EXPECT_EQ(EncodedSize(packed, t.block),
              8 + (t.last_packed_k * w + 7) / 8 + (2 * t.last_packed_k + 7) / 8);
    EXPECT_EQ(EncodedSize(bitmap, t.block), 8 + t.block / 8 + (2 * (t.last_packed_k + 1) + 7) / 8);
    for (const Codec& c : {packed, bitmap}) {
      const std::vector<float> x = testing::Gaussian(t.block + 33, t.block);
      const std::vector<float> y = RoundTrip(c, x);
      EXPECT_EQ(std::count_if(y.begin(), y.end(), [](float v) { return v != 0.0f; }),
                static_cast<long>(c.k + TopKCount(c, 33)));
    }
  }
}

// topk: packed for k <= 3 (at block 2048, 3 fields of 11 bits against Elias-Fano's
// 3 * 9 + 3 + (2047 >> 9) = 33: a tie, to packed), Elias-Fano from k = 4 while it takes fewer
// bits than the block, a bitmap from k = block / 4 + 1 (at k = block / 4, L = 2 makes
// 3 k + (block - 1) / 4 bits, one short of the block; at k + 1, L = 1 makes one more).
TEST(TopK, IndexFormsOfTopK) {
  struct Case {
    uint32_t block, last_packed_k, first_bitmap_k;
  };
  for (const Case& t :
       {Case{2048, 3, 513}, Case{1024, 3, 257}, Case{64, 3, 17}, Case{1000, 3, 251}}) {
    SCOPED_TRACE(t.block);
    EXPECT_EQ(TopKIndexForm(TopK(t.last_packed_k, t.block)), TopKForm::kPacked);
    EXPECT_EQ(TopKIndexForm(TopK(t.last_packed_k + 1, t.block)), TopKForm::kEliasFano);
    EXPECT_EQ(TopKIndexForm(TopK(t.first_bitmap_k - 1, t.block)), TopKForm::kEliasFano);
    EXPECT_EQ(TopKIndexForm(TopK(t.first_bitmap_k, t.block)), TopKForm::kBitmap);
    for (const uint32_t k :
         {t.last_packed_k, t.last_packed_k + 1, t.first_bitmap_k - 1, t.first_bitmap_k}) {
      const Codec c = TopK(k, t.block);
      // Never more than either other form.
      EXPECT_LE(TopKIndexBytes(c, t.block), (k * TopKIndexBits(t.block) + 7) / 8) << k;
      EXPECT_LE(TopKIndexBytes(c, t.block), t.block / 8u) << k;
      const std::vector<float> x = testing::Gaussian(2 * t.block + 33, t.block + k);
      const std::vector<float> y = RoundTrip(c, x);
      EXPECT_EQ(std::count_if(y.begin(), y.end(), [](float v) { return v != 0.0f; }),
                static_cast<long>(2 * c.k + TopKCount(c, 33)))
          << k;
    }
  }
  // Elias-Fano at topk:0.02, block 2048 (k 41): L = 5 (41 * 32 <= 2048 < 41 * 64), 41 * 5 low
  // bits, then 41 + (2047 >> 5) = 104 high bits: 309 bits, 39 bytes, against 57 packed.
  EXPECT_EQ(TopKEliasFanoLow(41, 2048), 5u);
  EXPECT_EQ(TopKIndexBytes(TopK(41, 2048), 2048), 39u);
  EXPECT_EQ(TopKIndexBytes(TopK(41, 2048, CodecKind::kTopKPacked), 2048), 57u);
}

// The high part by hand: block 64, k 4 (L = 4: 4 * 16 <= 64 < 4 * 32), entries 5, 6, 37, 63 of
// sizes 9, 8, 7, 6: low parts 5, 6, 5, 15 in 4-bit fields (bits 0-15), high parts 0, 0, 2, 3 set
// bits 16 + (0 + 0, 0 + 1, 2 + 2, 3 + 3) = 16, 17, 20, 22 of the 4 + (63 >> 4) = 7 high bits.
TEST(TopK, EliasFanoLayout) {
  const Codec c = TopK(4, 64);
  ASSERT_EQ(TopKIndexForm(c), TopKForm::kEliasFano);
  std::vector<float> x(64, 0.0f);
  x[5] = 9.0f;
  x[6] = -8.0f;
  x[37] = 7.0f;
  x[63] = 6.0f;
  std::vector<uint8_t> enc(EncodedSize(c, 64));
  ASSERT_EQ(enc.size(), 8u + 3 + 1);  // 23 index bits, 8 code bits
  ASSERT_TRUE(Encode(c, x, enc).ok());
  const uint8_t* rec = enc.data() + 8;
  EXPECT_EQ(rec[0], 0x65);  // low parts 5, 6
  EXPECT_EQ(rec[1], 0xF5);  // low parts 5, 15
  EXPECT_EQ(rec[2], 0x53);  // high bits 16, 17, 20, 22
  std::vector<float> y(64);
  ASSERT_TRUE(Decode(c, enc, y).ok());
  for (size_t i = 0; i < 64; ++i)
    EXPECT_EQ(y[i] != 0.0f, i == 5 || i == 6 || i == 37 || i == 63) << i;
}

TEST(TopK, EncodedSizeIsExact) {
  // topk-packed:0.02 at 2048: k 41, 11-bit indices: 57 + 11 bytes a block, 8 of magnitudes.
  const CodecKind packed = CodecKind::kTopKPacked;
  EXPECT_EQ(EncodedSize(TopK(41, 2048, packed), 0), 0u);
  EXPECT_EQ(EncodedSize(TopK(41, 2048, packed), 2048), 8u + 57 + 11);
  // 3 whole blocks and one of 100 values, which keeps ceil(41 * 100 / 2048) = 3 (5 + 1 bytes).
  EXPECT_EQ(EncodedSize(TopK(41, 2048, packed), 3 * 2048 + 100), 4 * 8u + 3 * 68 + 6);
  // topk-packed:0.02:1024: k 21, 10-bit indices: 27 + 6 bytes.
  EXPECT_EQ(EncodedSize(TopK(21, 1024, packed), 1024), 8u + 27 + 6);
  // A bitmap block of 7 values keeps ceil(300 * 7 / 2048) = 2: 1 + 1 bytes.
  EXPECT_EQ(EncodedSize(TopK(300, 2048, packed), 2048 + 7), 2 * 8u + 256 + 75 + 2);
  // topk:0.02 at 2048: Elias-Fano, 39 + 11 bytes a block; the block of 100 keeps 3, L = 5:
  // 15 + 3 + (99 >> 5) = 21 bits, 3 + 1 bytes.
  EXPECT_EQ(EncodedSize(TopK(41, 2048), 2048), 8u + 39 + 11);
  EXPECT_EQ(EncodedSize(TopK(41, 2048), 3 * 2048 + 100), 4 * 8u + 3 * 50 + 4);
  // topk:0.02:1024: k 21, L = 5: 105 + 21 + 31 = 157 bits, 20 + 6 bytes.
  EXPECT_EQ(EncodedSize(TopK(21, 1024), 1024), 8u + 20 + 6);
  // Encode refuses any other size.
  const std::vector<float> x(2048, 1.0f);
  std::vector<uint8_t> out(58 + 1);
  EXPECT_EQ(Encode(TopK(41, 2048), x, out).code(), absl::StatusCode::kInvalidArgument);
}

TEST(TopK, ParseAndName) {
  auto c = ParseCodec("topk:0.02");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->kind, CodecKind::kTopK);
  EXPECT_EQ(c->block, 2048u);
  EXPECT_EQ(c->k, 41u);  // ceil(40.96)
  c = ParseCodec("topk:0.02:1024");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->k, 21u);
  EXPECT_EQ(CodecName(*c), "topk:21/1024");
  c = ParseCodec(CodecName(*c));
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->k, 21u);
  EXPECT_EQ(c->block, 1024u);
  EXPECT_EQ(ParseCodec("topk:0.0001:64")->k, 1u);  // at least one
  EXPECT_EQ(ParseCodec("topk:1")->k, 2048u);
  // The first form, still readable (and sent by older workers): topk-packed.
  c = ParseCodec("topk-packed:0.02:1024");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->kind, CodecKind::kTopKPacked);
  EXPECT_EQ(c->k, 21u);
  EXPECT_EQ(CodecName(*c), "topk-packed:21/1024");
  EXPECT_EQ(ParseCodec(CodecName(*c))->kind, CodecKind::kTopKPacked);
  for (const char* bad :
       {"topk", "topk:", "topk:0", "topk:1.5", "topk:-0.1", "topk:abc", "topk:0.02:100",
        "topk:0.02:", "topk:0/2048", "topk:3000/2048", "topk:5/", "topk:nan", "topk-packed",
        "topk-packed:", "topk-packed:0", "topk-packedx:0.02", "topk-:0.02"}) {
    EXPECT_FALSE(ParseCodec(bad).ok()) << bad;
  }
  EXPECT_FALSE(ValidateCodec(Codec{CodecKind::kInt8, 256, 3}).ok()) << "k is for topk only";
  EXPECT_FALSE(ValidateCodec(TopK(0, 256)).ok());
  EXPECT_FALSE(ValidateCodec(TopK(0, 256, CodecKind::kTopKPacked)).ok());
  EXPECT_FALSE(ValidateCodec(Codec{static_cast<CodecKind>(7), 256, 3}).ok()) << "unknown kind";
}

}  // namespace
}  // namespace diloco::kernels
