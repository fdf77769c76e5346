// Every entry of the codec table (kernels/codec_table.h) against its promises: names parse back
// to the same entry, wire ids are unique, the encoded size is what the kernels write at uneven
// lengths, the fast path and the reference agree byte for byte, values come back within the
// entry's bound, and the check refuses a truncated, oversized or corrupted chunk.
#include "kernels/codec_table.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <string>
#include <vector>

#include "kernels/codec.h"
#include "kernels/reference.h"
#include "tests/kernels/test_data.h"

namespace diloco::kernels {
namespace {

// The codecs each entry is tried as: two blocks, and for sparse entries two k.
std::vector<Codec> Instances(const CodecEntry& e) {
  std::vector<Codec> out;
  for (uint32_t block : {64u, 264u, e.default_block}) {
    if (e.sparse) {
      out.push_back(Codec{e.kind, block, 1});
      out.push_back(Codec{e.kind, block, std::max<uint32_t>(1, block / 8)});
    } else {
      out.push_back(Codec{e.kind, block, 0});
    }
  }
  return out;
}

std::vector<size_t> UnevenLengths(Codec c) {
  return {0, 1, 2, 7, 63, 65, size_t{c.block} - 1, size_t{c.block} + 3, 3 * size_t{c.block} + 5};
}

TEST(CodecTable, WireIdsAndNamesUnique) {
  std::set<int> ids;
  std::set<std::string> names;
  for (const CodecEntry& e : AllCodecs()) {
    EXPECT_TRUE(ids.insert(static_cast<int>(e.kind)).second) << e.name;
    EXPECT_TRUE(names.insert(e.name).second) << e.name;
    EXPECT_EQ(FindCodec(e.kind), &e) << e.name;
    EXPECT_EQ(FindCodec(static_cast<uint8_t>(e.kind)), &e) << e.name;
    EXPECT_EQ(FindCodecByName(e.name), &e) << e.name;
  }
  EXPECT_EQ(FindCodec(uint8_t{200}), nullptr);
  EXPECT_EQ(FindCodecByName("int3"), nullptr);
}

TEST(CodecTable, NamesParseBackToTheSameEntry) {
  for (const CodecEntry& e : AllCodecs()) {
    const std::string bare = e.args == CodecArgs::kKeep ? std::string(e.name) + ":0.25" : e.name;
    absl::StatusOr<Codec> d = ParseCodec(bare);
    ASSERT_TRUE(d.ok()) << bare << ": " << d.status();
    EXPECT_EQ(d->kind, e.kind) << bare;
    EXPECT_EQ(d->block, e.default_block) << bare;
    for (Codec c : Instances(e)) {
      ASSERT_TRUE(ValidateCodec(c).ok()) << e.name;
      const std::string name = CodecName(c);
      absl::StatusOr<Codec> p = ParseCodec(name);
      ASSERT_TRUE(p.ok()) << name << ": " << p.status();
      EXPECT_EQ(p->kind, c.kind) << name;
      EXPECT_EQ(p->k, c.k) << name;
      if (e.has_scales || e.sparse) {
        EXPECT_EQ(p->block, c.block) << name;
      }
    }
  }
}

TEST(CodecTable, PropertiesAgreeWithTheConstexprHelpers) {
  for (const CodecEntry& e : AllCodecs()) {
    EXPECT_EQ(e.has_scales, HasScales(e.kind)) << e.name;
    EXPECT_EQ(e.sparse, IsTopK(e.kind)) << e.name;
    EXPECT_EQ(e.exact, e.max_error == 0.0f) << e.name;
    for (Codec c : Instances(e)) {
      for (size_t n : UnevenLengths(c)) {
        EXPECT_EQ(e.bytes(c, n), EncodedBytes(c, n)) << CodecName(c) << " n " << n;
        EXPECT_EQ(e.bytes(c, n), EncodedSize(c, n)) << CodecName(c) << " n " << n;
      }
    }
  }
}

// bytes(c, n) is what both encoders write: a longer or shorter buffer is refused, and nothing
// past bytes(c, n) is touched when the kernels are handed a larger one.
TEST(CodecTable, BytesIsTheEncodedSize) {
  for (const CodecEntry& e : AllCodecs()) {
    for (Codec c : Instances(e)) {
      for (size_t n : UnevenLengths(c)) {
        const std::vector<float> x = testing::BlockyData(n, c.block, 7 + n);
        const size_t bytes = e.bytes(c, n);
        std::vector<uint8_t> wrong(bytes + 1);
        EXPECT_FALSE(Encode(c, x, wrong).ok()) << CodecName(c) << " n " << n;
        if (bytes > 0) {
          wrong.resize(bytes - 1);
          EXPECT_FALSE(Encode(c, x, wrong).ok()) << CodecName(c) << " n " << n;
        }
        std::vector<uint8_t> fast(bytes + 64, 0xA5), ref(bytes + 64, 0x5A);
        if (n > 0) e.encode(c, x.data(), n, 0, (n + c.block - 1) / c.block, fast.data());
        e.ref_encode(c, x.data(), n, ref.data());
        for (size_t i = bytes; i < fast.size(); ++i) {
          ASSERT_EQ(fast[i], 0xA5) << CodecName(c) << " n " << n << ": fast wrote byte " << i;
          ASSERT_EQ(ref[i], 0x5A) << CodecName(c) << " n " << n << ": ref wrote byte " << i;
        }
        fast.resize(bytes);
        ref.resize(bytes);
        EXPECT_EQ(fast, ref) << CodecName(c) << " n " << n;
      }
    }
  }
}

TEST(CodecTable, RoundTripWithinTheBound) {
  for (const CodecEntry& e : AllCodecs()) {
    for (Codec c : Instances(e)) {
      for (size_t n : UnevenLengths(c)) {
        const std::vector<float> x = testing::BlockyData(n, c.block, 11 + n);
        std::vector<uint8_t> enc(e.bytes(c, n)), ref_enc(enc.size());
        ASSERT_TRUE(Encode(c, x, enc).ok()) << CodecName(c);
        ASSERT_TRUE(ref::Encode(c, x, ref_enc).ok()) << CodecName(c);
        EXPECT_EQ(enc, ref_enc) << CodecName(c) << " n " << n;
        EXPECT_TRUE(CheckEncoded(c, enc, n).ok()) << CodecName(c) << " n " << n;
        std::vector<float> y(n), ref_y(n);
        ASSERT_TRUE(Decode(c, enc, y).ok()) << CodecName(c);
        ASSERT_TRUE(ref::Decode(c, enc, ref_y).ok()) << CodecName(c);
        for (size_t lo = 0; lo < n; lo += c.block) {
          const size_t hi = std::min(n, lo + c.block);
          float absmax = 0;
          for (size_t i = lo; i < hi; ++i) absmax = std::max(absmax, std::fabs(x[i]));
          const float bound = e.max_error * absmax * (1 + 1e-5f);
          for (size_t i = lo; i < hi; ++i) {
            ASSERT_LE(std::fabs(x[i] - y[i]), bound) << CodecName(c) << " n " << n << " i " << i;
            ASSERT_EQ(testing::Bits(y[i]), testing::Bits(ref_y[i])) << CodecName(c) << " i " << i;
          }
        }
        // Error feedback from a zero residual leaves exactly what did not travel.
        std::vector<float> err(n, 0.0f);
        std::vector<uint8_t> ef(enc.size());
        ASSERT_TRUE(ErrorFeedbackEncode(c, x, err, ef).ok()) << CodecName(c);
        EXPECT_EQ(ef, enc) << CodecName(c) << " n " << n;
        for (size_t i = 0; i < n; ++i) ASSERT_EQ(err[i], x[i] - y[i]) << CodecName(c) << " i " << i;
      }
    }
  }
}

TEST(CodecTable, CheckRefusesTruncatedOversizedAndCorrupted) {
  for (const CodecEntry& e : AllCodecs()) {
    for (Codec c : Instances(e)) {
      const size_t n = 2 * size_t{c.block} + 9;
      const std::vector<float> x = testing::BlockyData(n, c.block, 3);
      std::vector<uint8_t> enc(e.bytes(c, n));
      ASSERT_TRUE(Encode(c, x, enc).ok());
      ASSERT_TRUE(CheckEncoded(c, enc, n).ok()) << CodecName(c);
      std::vector<uint8_t> longer = enc;
      longer.push_back(0);
      EXPECT_FALSE(CheckEncoded(c, longer, n).ok()) << CodecName(c) << " oversized";
      EXPECT_FALSE(CheckEncoded(c, std::span(enc).first(enc.size() - 1), n).ok())
          << CodecName(c) << " truncated";
      std::vector<float> y(n);
      EXPECT_FALSE(Decode(c, longer, y).ok()) << CodecName(c);
      // A NaN in the first four bytes: the first value (fp32), the second (bf16), the first
      // scale (fp8, int8, int4) or the first block's low magnitude (top-k).
      const uint32_t nan = 0x7FC00000u;
      std::memcpy(enc.data(), &nan, sizeof(nan));
      EXPECT_FALSE(e.check(c, enc, n).ok()) << CodecName(c) << " NaN";
      EXPECT_FALSE(CheckEncoded(c, enc, n).ok()) << CodecName(c) << " NaN";
    }
  }
  const Codec unknown{static_cast<CodecKind>(200), 256, 0};
  EXPECT_FALSE(CheckEncoded(unknown, {}, 0).ok());
}

}  // namespace
}  // namespace diloco::kernels
