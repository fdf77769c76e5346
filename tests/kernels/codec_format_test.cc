// Codec names, sizes, validation, and hand-worked byte layouts of each codec.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "kernels/codec.h"
#include "kernels/quant_math.h"
#include "kernels/reference.h"

namespace diloco::kernels {
namespace {

TEST(CodecFormat, ParseAndName) {
  absl::StatusOr<Codec> c = ParseCodec("int4:128");
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->kind, CodecKind::kInt4);
  EXPECT_EQ(c->block, 128u);
  EXPECT_EQ(CodecName(*c), "int4:128");
  c = ParseCodec("fp8");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->kind, CodecKind::kFp8E4M3);
  EXPECT_EQ(c->block, 256u);
  EXPECT_EQ(CodecName(Codec{CodecKind::kBf16, 256}), "bf16");
  EXPECT_EQ(CodecName(Codec{CodecKind::kInt8, 1000}), "int8:1000");
  for (const char* bad :
       {"int3", "int8:", "int8:abc", "int8:32", "int8:4096", "int8:100", "int8:128x", "", ":128"}) {
    EXPECT_FALSE(ParseCodec(bad).ok()) << bad;
  }
}

TEST(CodecFormat, ValidateBlockRule) {
  EXPECT_TRUE(ValidateCodec(Codec{CodecKind::kInt8, 64}).ok());
  EXPECT_TRUE(ValidateCodec(Codec{CodecKind::kInt8, 2048}).ok());
  EXPECT_TRUE(ValidateCodec(Codec{CodecKind::kInt8, 1000}).ok());
  EXPECT_FALSE(ValidateCodec(Codec{CodecKind::kInt8, 56}).ok());
  EXPECT_FALSE(ValidateCodec(Codec{CodecKind::kInt8, 2056}).ok());
  EXPECT_FALSE(ValidateCodec(Codec{CodecKind::kInt8, 1001}).ok());
  EXPECT_FALSE(ValidateCodec(Codec{static_cast<CodecKind>(9), 256}).ok());
}

TEST(CodecFormat, EncodedSize) {
  EXPECT_EQ(EncodedSize(Codec{CodecKind::kFp32, 64}, 10), 40u);
  EXPECT_EQ(EncodedSize(Codec{CodecKind::kBf16, 64}, 10), 20u);
  EXPECT_EQ(EncodedSize(Codec{CodecKind::kInt8, 64}, 0), 0u);
  EXPECT_EQ(EncodedSize(Codec{CodecKind::kInt8, 64}, 65), 2 * 4 + 65u);
  EXPECT_EQ(EncodedSize(Codec{CodecKind::kFp8E4M3, 64}, 64), 4 + 64u);
  EXPECT_EQ(EncodedSize(Codec{CodecKind::kInt4, 64}, 129), 3 * 4 + 65u);
}

TEST(CodecFormat, WrongBufferSizeRefused) {
  std::vector<float> x(100, 1.0f);
  std::vector<uint8_t> out(EncodedSize(Codec{}, 100) + 1);
  EXPECT_EQ(Encode(Codec{}, x, out).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(Decode(Codec{}, out, x).code(), absl::StatusCode::kInvalidArgument);
  std::vector<float> err(99);
  out.resize(EncodedSize(Codec{}, 100));
  EXPECT_EQ(ErrorFeedbackEncode(Codec{}, x, err, out).code(), absl::StatusCode::kInvalidArgument);
}

TEST(CodecFormat, Int4LayoutByHand) {
  // Block of 64: absmax 7 -> scale 1; values 7, -7, 1, 0, -3, 2.6 (rounds to 3), 0.5 (ties to
  // even: 0), 1.5 (ties to even: 2), then zeros.
  std::vector<float> x(64, 0.0f);
  const float head[] = {7, -7, 1, 0, -3, 2.6f, 0.5f, 1.5f};
  std::copy(std::begin(head), std::end(head), x.begin());
  const Codec c{CodecKind::kInt4, 64};
  std::vector<uint8_t> out(EncodedSize(c, 64));
  ASSERT_TRUE(Encode(c, x, out).ok());
  float scale;
  std::memcpy(&scale, out.data(), 4);
  EXPECT_EQ(scale, 1.0f);
  // Low nibble first: (7, -7=0x9) -> 0x97; (1, 0) -> 0x01; (-3=0xD, 3) -> 0x3D; (0, 2) -> 0x20.
  EXPECT_EQ(out[4], 0x97);
  EXPECT_EQ(out[5], 0x01);
  EXPECT_EQ(out[6], 0x3D);
  EXPECT_EQ(out[7], 0x20);
  for (size_t i = 8; i < out.size(); ++i) EXPECT_EQ(out[i], 0) << i;
}

TEST(CodecFormat, Int8LayoutByHand) {
  // absmax 7.9375 = 127 / 16 -> scale 1/16 exactly, so every quotient below is exact.
  std::vector<float> x(64, 0.0f);
  x[0] = -7.9375f;   // -127
  x[1] = 0.03125f;   // 0.5 -> ties to even: 0
  x[2] = 0.09375f;   // 1.5 -> ties to even: 2
  x[3] = 1.0f;       // 16
  x[4] = -0.15625f;  // -2.5 -> -2
  const Codec c{CodecKind::kInt8, 64};
  std::vector<uint8_t> out(EncodedSize(c, 64));
  ASSERT_TRUE(Encode(c, x, out).ok());
  float scale;
  std::memcpy(&scale, out.data(), 4);
  EXPECT_EQ(scale, 0.0625f);
  EXPECT_EQ(static_cast<int8_t>(out[4]), -127);
  EXPECT_EQ(static_cast<int8_t>(out[5]), 0);
  EXPECT_EQ(static_cast<int8_t>(out[6]), 2);
  EXPECT_EQ(static_cast<int8_t>(out[7]), 16);
  EXPECT_EQ(static_cast<int8_t>(out[8]), -2);
}

TEST(CodecFormat, Fp8E4M3Codes) {
  EXPECT_EQ(qm::Fp8E4M3FromFloat(448.0f), 0x7E);
  EXPECT_EQ(qm::Fp8E4M3FromFloat(1.0f), 0x38);
  EXPECT_EQ(qm::Fp8E4M3FromFloat(-2.0f), 0xC0);
  EXPECT_EQ(qm::Fp8E4M3FromFloat(0x1p-9f), 0x01);    // smallest subnormal
  EXPECT_EQ(qm::Fp8E4M3FromFloat(0x1p-10f), 0x00);   // tie -> even (0)
  EXPECT_EQ(qm::Fp8E4M3FromFloat(0x1.8p-9f), 0x02);  // 1.5 steps -> 2 (even)
  EXPECT_EQ(qm::Fp8E4M3FromFloat(0x1.fp-7f), 0x08);  // 7.75 steps rounds up to 2^-6
  EXPECT_EQ(qm::Fp8E4M3FromFloat(1.0625f), 0x38);    // halfway 1 and 1.125 -> even
  EXPECT_EQ(qm::Fp8E4M3FromFloat(1.1875f), 0x3A);    // halfway 1.125 and 1.25 -> even
  for (uint32_t code = 0; code < 256; ++code) {
    if ((code & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(qm::FloatFromFp8E4M3(code)));
      continue;
    }
    const float v = qm::FloatFromFp8E4M3(code);
    if (code == 0x80) continue;  // -0 encodes back as -0 (0x80): fine, but skip the compare
    EXPECT_EQ(qm::Fp8E4M3FromFloat(v), code) << code;
  }
  EXPECT_EQ(qm::FloatFromFp8E4M3(0x7E), 448.0f);
  EXPECT_EQ(qm::FloatFromFp8E4M3(0x01), 0x1p-9f);
}

TEST(CodecFormat, Bf16RoundsHalfToEven) {
  EXPECT_EQ(qm::Bf16FromFloat(1.0f), 0x3F80);
  EXPECT_EQ(qm::Bf16FromFloat(1.0f + 0x1p-8f), 0x3F80);      // tie -> even
  EXPECT_EQ(qm::Bf16FromFloat(1.0f + 3 * 0x1p-8f), 0x3F82);  // tie -> even (up)
  EXPECT_EQ(qm::Bf16FromFloat(1.0f + 0x1p-8f + 0x1p-20f), 0x3F81);
  EXPECT_EQ(qm::FloatFromBf16(0xC040), -3.0f);
}

TEST(CodecFormat, DecodeRefusesBadScales) {
  const Codec c{CodecKind::kInt8, 64};
  std::vector<float> x(130, 1.0f);
  std::vector<uint8_t> enc(EncodedSize(c, x.size()));
  ASSERT_TRUE(Encode(c, x, enc).ok());
  for (float bad :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(), -1.0f}) {
    std::vector<uint8_t> broken = enc;
    std::memcpy(broken.data() + 4, &bad, 4);  // second block's scale
    std::vector<float> acc(130, 5.0f);
    EXPECT_EQ(DecodeAccumulate(c, broken, 1.0f, acc).code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(acc, std::vector<float>(130, 5.0f)) << "nothing written";
    EXPECT_EQ(ref::DecodeAccumulate(c, broken, 1.0f, acc).code(),
              absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(Decode(c, broken, acc).code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(CodecFormat, UnalignedBuffersWork) {
  // Network buffers may start anywhere: encode/decode through an odd offset.
  const Codec c{CodecKind::kBf16, 64};
  std::vector<float> x(1001);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 256) - 128.0f;
  std::vector<uint8_t> storage(EncodedSize(c, x.size()) + 1);
  std::span<uint8_t> out(storage.data() + 1, storage.size() - 1);
  ASSERT_TRUE(Encode(c, x, out).ok());
  std::vector<float> y(x.size());
  ASSERT_TRUE(Decode(c, out, y).ok());
  EXPECT_EQ(x, y);  // these values are exact in bf16
}

}  // namespace
}  // namespace diloco::kernels
