// The payload layout (schema/payload_layout.h) every reader and writer of the wire walks: chunks of
// whole codec blocks, the last one shorter, back to back, each of the encoded size of its values.
#include "schema/payload_layout.h"

#include <gtest/gtest.h>

#include <vector>

#include "kernels/codec.h"

namespace diloco::wire {
namespace {

TEST(PayloadLayoutTest, ChunksCoverTheValuesAndTheBytesBackToBack) {
  for (const char* name : {"fp32:256", "bf16:256", "int8:256", "int4:128", "fp8:512"}) {
    const kernels::Codec codec = *kernels::ParseCodec(name);
    const uint64_t chunk = ChunkElements(codec.block);
    EXPECT_EQ(chunk % codec.block, 0u) << name;
    for (uint64_t numel : {uint64_t{1}, chunk - 1, chunk, chunk + 1, 3 * chunk + 777}) {
      const PayloadLayout layout(codec, numel);
      uint64_t values = 0, bytes = 0, index = 0;
      for (const PayloadChunk& c : layout) {
        EXPECT_EQ(c.index, index++);
        EXPECT_EQ(c.offset, values);
        EXPECT_EQ(c.byte_offset, bytes);
        EXPECT_GT(c.count, 0u);
        EXPECT_LE(c.count, chunk);
        EXPECT_EQ(c.bytes, kernels::EncodedSize(codec, c.count)) << name << " " << numel;
        values += c.count;
        bytes += c.bytes;
      }
      EXPECT_EQ(values, numel) << name;
      EXPECT_EQ(index, layout.chunks()) << name;
      EXPECT_EQ(bytes, layout.bytes()) << name << " " << numel;
    }
  }
}

TEST(PayloadLayoutTest, AnEmptyPayloadHasNoChunks) {
  const PayloadLayout layout(*kernels::ParseCodec("int8:256"), 0);
  EXPECT_EQ(layout.chunks(), 0u);
  EXPECT_EQ(layout.bytes(), 0u);
  EXPECT_TRUE(layout.begin() == layout.end());
}

}  // namespace
}  // namespace diloco::wire
