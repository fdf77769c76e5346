// Every codec x block size x awkward length: fast bytes == reference bytes (for every
// instruction set this CPU has), round-trip error within the codec's bound, DecodeAccumulate ==
// acc + w * Decode, error feedback fast == reference, and non-finite input refused untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/codec.h"
#include "kernels/codec_format.h"
#include "kernels/codec_table.h"
#include "kernels/fast_ops.h"
#include "kernels/reference.h"
#include "tests/kernels/test_data.h"

namespace diloco::kernels {
namespace {

using testing::Bits;
using testing::BlockyData;

enum class Len { kZero, kOne, kBlockMinus1, kBlock, kBlockPlus1, kLarge };

size_t LenOf(Len l, uint32_t block) {
  switch (l) {
    case Len::kZero:
      return 0;
    case Len::kOne:
      return 1;
    case Len::kBlockMinus1:
      return block - 1;
    case Len::kBlock:
      return block;
    case Len::kBlockPlus1:
      return block + 1;
    case Len::kLarge:
      return 100003;
  }
  return 0;
}

using Param = std::tuple<CodecKind, uint32_t, Len>;

class CodecSweep : public ::testing::TestWithParam<Param> {
 protected:
  Codec codec() const { return Codec{std::get<0>(GetParam()), std::get<1>(GetParam())}; }
  size_t n() const { return LenOf(std::get<2>(GetParam()), std::get<1>(GetParam())); }
  std::vector<float> Data(uint32_t seed = 1) const { return BlockyData(n(), codec().block, seed); }

  std::vector<uint8_t> RefEncode(const std::vector<float>& x) const {
    std::vector<uint8_t> out(EncodedSize(codec(), x.size()));
    EXPECT_TRUE(ref::Encode(codec(), x, out).ok());
    return out;
  }
  float ScaleOf(const std::vector<uint8_t>& enc, size_t i) const {
    float s;
    std::memcpy(&s, enc.data() + (i / codec().block) * 4, 4);
    return s;
  }
};

TEST_P(CodecSweep, FastEncodeBytesEqualReference) {
  const std::vector<float> x = Data();
  const std::vector<uint8_t> want = RefEncode(x);
  std::vector<uint8_t> got(want.size(), 0xCD);
  ASSERT_TRUE(Encode(codec(), x, got).ok());
  EXPECT_EQ(got, want);
}

TEST_P(CodecSweep, EveryInstructionSetMatchesReference) {
  const std::vector<float> x = Data(2);
  const std::vector<uint8_t> want = RefEncode(x);
  std::vector<float> want_dec(n());
  ASSERT_TRUE(ref::Decode(codec(), want, want_dec).ok());
  __builtin_cpu_init();
  std::vector<const internal::FastOps*> tables = {&internal::GenericOps()};
  if (__builtin_cpu_supports("avx2")) tables.push_back(&internal::Avx2Ops());
  if (__builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq")) {
    tables.push_back(&internal::Avx512Ops());
  }
  const size_t units = (n() + codec().block - 1) / codec().block;
  for (const internal::FastOps* ops : tables) {
    SCOPED_TRACE(ops->isa);
    std::vector<uint8_t> got(want.size(), 0xCD);
    ops->encode(codec(), x.data(), n(), 0, units, got.data());
    EXPECT_EQ(got, want);
    std::vector<float> dec(n(), -1.0f);
    ops->decode(codec(), want.data(), n(), 0, units, 1.0f, false, dec.data());
    for (size_t i = 0; i < n(); ++i) ASSERT_EQ(Bits(dec[i]), Bits(want_dec[i])) << i;
  }
}

TEST_P(CodecSweep, RoundTripWithinBound) {
  const std::vector<float> x = Data(3);
  const std::vector<uint8_t> enc = RefEncode(x);
  std::vector<float> y(n(), -1.0f);
  ASSERT_TRUE(Decode(codec(), enc, y).ok());
  const float kUlps = 1.0f + 1e-5f;  // slack for the rounding of scale and of q * scale
  for (size_t i = 0; i < n(); ++i) {
    const float err = std::fabs(x[i] - y[i]);
    float bound = 0.0f;
    switch (codec().kind) {
      case CodecKind::kFp32:
        break;
      case CodecKind::kBf16:
        bound = std::fabs(x[i]) * 0x1p-8f;
        break;
      case CodecKind::kInt8:
      case CodecKind::kInt4:
        bound = ScaleOf(enc, i) / 2 * kUlps;
        break;
      case CodecKind::kFp8E4M3:
        // 3 mantissa bits: half an ulp is 2^-4 relative; the subnormal step is 2^-9 * scale.
        bound = std::max(std::fabs(x[i]) * 0x1p-4f, ScaleOf(enc, i) * 0x1p-10f) * kUlps;
        break;
      default:  // a dense codec without its bound here fails unless it is exact
        break;
    }
    ASSERT_LE(err, bound) << "i=" << i << " x=" << x[i] << " y=" << y[i];
  }
  if (n() >= 3 * codec().block && HasScales(codec().kind)) {
    EXPECT_EQ(ScaleOf(enc, codec().block), 0.0f) << "all-zero block must have scale 0";
    for (size_t i = codec().block; i < 2 * codec().block; ++i) ASSERT_EQ(y[i], 0.0f);
  }
}

TEST_P(CodecSweep, DecodeAccumulateIsAccPlusWeightTimesDecode) {
  const std::vector<float> x = Data(4);
  const std::vector<uint8_t> enc = RefEncode(x);
  std::vector<float> dec(n());
  ASSERT_TRUE(Decode(codec(), enc, dec).ok());
  const std::vector<float> acc0 = testing::Gaussian(n(), 5);
  const float w = 0.37f;
  std::vector<float> fast = acc0, slow = acc0;
  ASSERT_TRUE(DecodeAccumulate(codec(), enc, w, fast).ok());
  ASSERT_TRUE(ref::DecodeAccumulate(codec(), enc, w, slow).ok());
  for (size_t i = 0; i < n(); ++i) {
    const float want = acc0[i] + w * dec[i];
    ASSERT_EQ(Bits(fast[i]), Bits(want)) << i;
    ASSERT_EQ(Bits(slow[i]), Bits(want)) << i;
  }
}

TEST_P(CodecSweep, ErrorFeedbackFastEqualsReference) {
  const std::vector<float> d1 = Data(6), d2 = Data(7);
  std::vector<float> err_fast(n(), 0.0f), err_ref(n(), 0.0f);
  std::vector<uint8_t> out_fast(EncodedSize(codec(), n())), out_ref(out_fast.size());
  for (const std::vector<float>* d : {&d1, &d2}) {
    ASSERT_TRUE(ErrorFeedbackEncode(codec(), *d, err_fast, out_fast).ok());
    ASSERT_TRUE(ref::ErrorFeedbackEncode(codec(), *d, err_ref, out_ref).ok());
    EXPECT_EQ(out_fast, out_ref);
    for (size_t i = 0; i < n(); ++i) ASSERT_EQ(Bits(err_fast[i]), Bits(err_ref[i])) << i;
  }
  if (codec().kind == CodecKind::kFp32) {
    for (size_t i = 0; i < n(); ++i) ASSERT_EQ(err_ref[i], 0.0f) << "fp32 carries everything";
  }
}

// The same sweep without the empty length, which has no value to poison.
class CodecSweepNonEmpty : public CodecSweep {};

TEST_P(CodecSweepNonEmpty, NonFiniteInputRefusedAndNothingWritten) {
  ASSERT_GT(n(), 0u);
  const float poisons[] = {std::numeric_limits<float>::quiet_NaN(),
                           std::numeric_limits<float>::infinity(),
                           -std::numeric_limits<float>::infinity()};
  for (float poison : poisons) {
    std::vector<float> x = Data(8);
    x[n() / 2] = poison;
    const std::vector<uint8_t> sentinel(EncodedSize(codec(), n()), 0xAB);
    std::vector<uint8_t> out = sentinel;
    absl::Status st = Encode(codec(), x, out);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_EQ(out, sentinel);
    st = ref::Encode(codec(), x, out);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_EQ(out, sentinel);

    const std::vector<float> err0 = testing::Gaussian(n(), 9);
    std::vector<float> err = err0;
    st = ErrorFeedbackEncode(codec(), x, err, out);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_EQ(out, sentinel);
    EXPECT_EQ(err, err0);
    st = ref::ErrorFeedbackEncode(codec(), x, err, out);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
    EXPECT_EQ(out, sentinel);
    EXPECT_EQ(err, err0);
  }
}

std::string Name(const ::testing::TestParamInfo<Param>& info) {
  static const char* lens[] = {"zero", "one", "blockm1", "block", "blockp1", "large"};
  return std::string(FindCodec(std::get<0>(info.param))->name) + "_b" +
         std::to_string(std::get<1>(info.param)) + "_" +
         lens[static_cast<int>(std::get<2>(info.param))];
}

// Every dense codec of the table (top-k: tests/kernels/topk_test.cc).
std::vector<CodecKind> DenseKinds() {
  std::vector<CodecKind> kinds;
  for (const CodecEntry& e : AllCodecs())
    if (!e.sparse) kinds.push_back(e.kind);
  return kinds;
}

const auto kKinds = ::testing::ValuesIn(DenseKinds());
const auto kBlocks = ::testing::Values(64u, 128u, 256u, 1000u, 2048u);

INSTANTIATE_TEST_SUITE_P(AllCodecs, CodecSweep,
                         ::testing::Combine(kKinds, kBlocks,
                                            ::testing::Values(Len::kZero, Len::kOne,
                                                              Len::kBlockMinus1, Len::kBlock,
                                                              Len::kBlockPlus1, Len::kLarge)),
                         Name);
INSTANTIATE_TEST_SUITE_P(AllCodecs, CodecSweepNonEmpty,
                         ::testing::Combine(kKinds, kBlocks,
                                            ::testing::Values(Len::kOne, Len::kBlockMinus1,
                                                              Len::kBlock, Len::kBlockPlus1,
                                                              Len::kLarge)),
                         Name);

}  // namespace
}  // namespace diloco::kernels
