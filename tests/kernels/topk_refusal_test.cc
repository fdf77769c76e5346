// A hostile or damaged top-k payload is refused before any value is written, by the fast and the
// reference decoders alike, with an error naming the cause: a bad magnitude, a packed or
// Elias-Fano index out of range, repeated or out of order, an Elias-Fano high part or a bitmap
// with the wrong count, a bitmap mark past the block.
#include <gtest/gtest.h>

#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernels/codec.h"
#include "kernels/reference.h"
#include "kernels/topk.h"
#include "tests/kernels/test_data.h"

namespace diloco::kernels {
namespace {

// Packed: topk-packed, k 4 of 64 (24 bits < 64). Bitmap: k 20 of 64. Elias-Fano: topk, k 8 of
// 64 (L = 3: 24 low bits, 8 + 7 high bits); the short block of 30 keeps 4 (L = 2: 8 + 11).
const Codec kPacked{CodecKind::kTopKPacked, 64, 4};
const Codec kBitmap{CodecKind::kTopK, 64, 20};
const Codec kEliasFano{CodecKind::kTopK, 64, 8};
constexpr size_t kN = 64 + 30;  // a whole block and a short one

std::vector<uint8_t> Valid(Codec c) {
  std::vector<uint8_t> enc(EncodedSize(c, kN));
  EXPECT_TRUE(Encode(c, testing::Gaussian(kN, 1), enc).ok());
  return enc;
}

void SetField(uint8_t* rec, size_t j, uint32_t w, uint32_t v) {
  for (uint32_t i = 0; i < w; ++i) {
    const size_t bit = j * w + i;
    rec[bit / 8] =
        static_cast<uint8_t>((rec[bit / 8] & ~(1u << (bit % 8))) | (((v >> i) & 1u) << (bit % 8)));
  }
}

uint32_t Field(const uint8_t* rec, size_t j, uint32_t w) {
  uint32_t v = 0;
  for (uint32_t i = 0; i < w; ++i) v |= ((rec[(j * w + i) / 8] >> ((j * w + i) % 8)) & 1u) << i;
  return v;
}

// Every decoder refuses `enc` with InvalidArgument naming `cause`, and writes nothing.
void ExpectRefused(Codec c, const std::vector<uint8_t>& enc, const std::string& cause) {
  const std::vector<float> sentinel(kN, 3.0f);
  std::vector<float> out = sentinel;
  for (int which = 0; which < 4; ++which) {
    absl::Status st = which == 0   ? Decode(c, enc, out)
                      : which == 1 ? DecodeAccumulate(c, enc, 1.0f, out)
                      : which == 2 ? ref::Decode(c, enc, out)
                                   : ref::DecodeAccumulate(c, enc, 1.0f, out);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << which << ": " << st;
    EXPECT_NE(std::string(st.message()).find(cause), std::string::npos) << st;
    EXPECT_EQ(out, sentinel) << which;
  }
}

// Writes block b's Elias-Fano section by hand: entry j has high part highs[j], low part lows[j].
void SetEliasFano(std::vector<uint8_t>& enc, size_t b, const std::vector<uint32_t>& highs,
                  const std::vector<uint32_t>& lows) {
  const size_t len = std::min<size_t>(64, kN - b * 64), kb = TopKCount(kEliasFano, len);
  const uint32_t l = TopKEliasFanoLow(kb, len);
  uint8_t* rec = enc.data() + internal::TopKRecordOffset(kEliasFano, kN, b);
  std::memset(rec, 0, TopKIndexBytes(kEliasFano, len));
  for (size_t j = 0; j < lows.size(); ++j) SetField(rec, j, l, lows[j]);
  for (size_t j = 0; j < highs.size(); ++j) {
    const size_t bit = kb * l + highs[j] + j;
    rec[bit / 8] |= static_cast<uint8_t>(1u << (bit % 8));
  }
}

TEST(TopKRefusal, ValidPayloadsDecode) {
  ASSERT_EQ(TopKIndexForm(kPacked), TopKForm::kPacked);
  ASSERT_EQ(TopKIndexForm(kBitmap), TopKForm::kBitmap);
  ASSERT_EQ(TopKIndexForm(kEliasFano), TopKForm::kEliasFano);
  for (const Codec& c : {kPacked, kBitmap, kEliasFano}) {
    std::vector<float> out(kN);
    EXPECT_TRUE(Decode(c, Valid(c), out).ok());
    EXPECT_TRUE(internal::CheckTopK(c, Valid(c), kN).ok());
  }
}

TEST(TopKRefusal, BadMagnitudes) {
  const float bad[] = {-1.0f, -0.0f, std::numeric_limits<float>::infinity(),
                       std::numeric_limits<float>::quiet_NaN()};
  for (const Codec& c : {kPacked, kBitmap, kEliasFano}) {
    for (size_t slot = 0; slot < 4; ++slot) {  // lo, hi of block 0, then of block 1
      for (float v : bad) {
        std::vector<uint8_t> enc = Valid(c);
        std::memcpy(enc.data() + 4 * slot, &v, 4);
        ExpectRefused(c, enc, "negative or non-finite magnitude");
      }
    }
  }
}

TEST(TopKRefusal, PackedIndexOutOfRange) {
  std::vector<uint8_t> enc = Valid(kPacked);
  // Block 1 holds 30 values: index 30 (in range for a full block) is not.
  uint8_t* rec = enc.data() + internal::TopKRecordOffset(kPacked, kN, 1);
  SetField(rec, TopKCount(kPacked, 30) - 1, TopKIndexBits(64), 30);
  ExpectRefused(kPacked, enc, "index 30 out of range for a block of 30 values");
  enc = Valid(kPacked);
  rec = enc.data() + internal::TopKRecordOffset(kPacked, kN, 0);
  SetField(rec, 3, TopKIndexBits(64), 63);  // the largest index is fine as the last one
  EXPECT_TRUE(internal::CheckTopK(kPacked, enc, kN).ok());
}

TEST(TopKRefusal, PackedIndexRepeatedOrOutOfOrder) {
  const uint32_t w = TopKIndexBits(64);
  std::vector<uint8_t> enc = Valid(kPacked);
  uint8_t* rec = enc.data() + internal::TopKRecordOffset(kPacked, kN, 0);
  SetField(rec, 2, w, Field(rec, 1, w));  // a duplicate
  ExpectRefused(kPacked, enc, "repeats or is out of order");
  enc = Valid(kPacked);
  rec = enc.data() + internal::TopKRecordOffset(kPacked, kN, 0);
  const uint32_t first = Field(rec, 0, w);
  SetField(rec, 0, w, Field(rec, 1, w));
  SetField(rec, 1, w, first);  // swapped: the same set, out of order
  ExpectRefused(kPacked, enc, "repeats or is out of order");
}

TEST(TopKRefusal, EliasFanoIndexOutOfRange) {
  // Block 1 holds 30 values (4 kept, L = 2): high part 7 with low part 1 is 29, the last value;
  // with low part 3 it is 31, past the block although its high part is in range.
  std::vector<uint8_t> enc = Valid(kEliasFano);
  SetEliasFano(enc, 1, {0, 0, 0, 7}, {0, 1, 2, 1});
  EXPECT_TRUE(internal::CheckTopK(kEliasFano, enc, kN).ok());
  SetEliasFano(enc, 1, {0, 0, 0, 7}, {0, 1, 2, 3});
  ExpectRefused(kEliasFano, enc, "index 31 out of range for a block of 30 values");
}

TEST(TopKRefusal, EliasFanoIndexRepeatedOrOutOfOrder) {
  // Block 0 (8 kept, L = 3): entries 1 and 2 share high part 2; equal low parts repeat an index,
  // falling ones put them out of order.
  std::vector<uint8_t> enc = Valid(kEliasFano);
  SetEliasFano(enc, 0, {0, 2, 2, 3, 4, 5, 6, 7}, {0, 5, 6, 0, 0, 0, 0, 0});
  EXPECT_TRUE(internal::CheckTopK(kEliasFano, enc, kN).ok());
  SetEliasFano(enc, 0, {0, 2, 2, 3, 4, 5, 6, 7}, {0, 5, 5, 0, 0, 0, 0, 0});
  ExpectRefused(kEliasFano, enc, "index 21 at position 2 repeats or is out of order");
  SetEliasFano(enc, 0, {0, 2, 2, 3, 4, 5, 6, 7}, {0, 6, 5, 0, 0, 0, 0, 0});
  ExpectRefused(kEliasFano, enc, "index 21 at position 2 repeats or is out of order");
}

TEST(TopKRefusal, EliasFanoWrongCount) {
  std::vector<uint8_t> enc = Valid(kEliasFano);
  SetEliasFano(enc, 0, {0, 1, 2, 3, 4, 5, 6}, {0, 0, 0, 0, 0, 0, 0, 0});  // one high mark short
  ExpectRefused(kEliasFano, enc, "Elias-Fano high bits mark 7 entries, the codec keeps 8");
  enc = Valid(kEliasFano);
  // One mark too many: a ninth in the last high bit (8 + 7 high bits; 8 indices end at 7 + 7).
  SetEliasFano(enc, 0, {0, 1, 2, 3, 4, 5, 6, 6, 6}, {0, 0, 0, 0, 0, 0, 0, 0});
  ExpectRefused(kEliasFano, enc, "Elias-Fano high bits mark 9 entries, the codec keeps 8");
  enc = Valid(kEliasFano);
  SetEliasFano(enc, 1, {}, {});
  ExpectRefused(kEliasFano, enc, "Elias-Fano high bits mark 0 entries, the codec keeps 4");
}

TEST(TopKRefusal, BitmapWrongCount) {
  std::vector<uint8_t> enc = Valid(kBitmap);
  uint8_t* rec = enc.data() + internal::TopKRecordOffset(kBitmap, kN, 0);
  size_t unmarked = 0;
  while ((rec[unmarked / 8] >> (unmarked % 8)) & 1u) ++unmarked;
  rec[unmarked / 8] |= static_cast<uint8_t>(1u << (unmarked % 8));  // one mark too many
  ExpectRefused(kBitmap, enc, "bitmap marks 21 entries, the codec keeps 20");
  enc = Valid(kBitmap);
  rec = enc.data() + internal::TopKRecordOffset(kBitmap, kN, 0);
  std::memset(rec, 0, 8);
  ExpectRefused(kBitmap, enc, "bitmap marks 0 entries");
}

TEST(TopKRefusal, BitmapMarkPastTheBlock) {
  std::vector<uint8_t> enc = Valid(kBitmap);
  // Block 1 holds 30 values: its bitmap is 4 bytes, bits 30 and 31 must stay clear. Move one
  // mark there so the count is still right.
  uint8_t* rec = enc.data() + internal::TopKRecordOffset(kBitmap, kN, 1);
  size_t marked = 0;
  while (!((rec[marked / 8] >> (marked % 8)) & 1u)) ++marked;
  rec[marked / 8] &= static_cast<uint8_t>(~(1u << (marked % 8)));
  rec[3] |= 0x80;
  ExpectRefused(kBitmap, enc, "bitmap marks an entry past the block's 30 values");
}

TEST(TopKRefusal, WrongSize) {
  for (const Codec& c : {kPacked, kBitmap, kEliasFano}) {
    std::vector<uint8_t> enc = Valid(c);
    enc.pop_back();
    std::vector<float> out(kN, 3.0f);
    EXPECT_EQ(Decode(c, enc, out).code(), absl::StatusCode::kInvalidArgument);
    enc.push_back(0);
    enc.push_back(0);
    EXPECT_EQ(DecodeAccumulate(c, enc, 1.0f, out).code(), absl::StatusCode::kInvalidArgument);
    for (float v : out) ASSERT_EQ(v, 3.0f);
  }
}

}  // namespace
}  // namespace diloco::kernels
