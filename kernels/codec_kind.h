// The codec descriptor (kind + block size, and k for the sparse top-k codec), split out of
// codec.h so that CUDA translation units (compiled as C++17, without <span> or Abseil) can name
// it too. Include codec.h in C++ code.
#pragma once

#include <cstddef>
#include <cstdint>

namespace diloco::kernels {

// kTopK is the sparse push codec (kernels/topk.h); it has a CPU implementation only.
enum class CodecKind : uint8_t {
  kFp32 = 0,
  kBf16 = 1,
  kFp8E4M3 = 2,
  kInt8 = 3,
  kInt4 = 4,
  kTopK = 5
};

struct Codec {
  CodecKind kind = CodecKind::kInt8;
  uint32_t block = 256;
  // kTopK only: entries kept per full block, in [1, block]; 0 for every other kind.
  uint32_t k = 0;
};

// Block sizes accepted by ValidateCodec: multiples of 8 in [64, 2048]. Multiples of 8 keep every
// block byte-aligned in the int4 payload and 32-byte aligned in fp32, so blocks can be encoded
// independently (in parallel, and by one CUDA warp each) with vector loads.
inline constexpr uint32_t kMinBlock = 64;
inline constexpr uint32_t kMaxBlock = 2048;
inline constexpr uint32_t kBlockMultiple = 8;

// One fp32 scale per block before the values (fp8, int8, int4). Top-k has two per block, laid
// out by the TopK* functions below.
constexpr bool HasScales(CodecKind k) {
  return k == CodecKind::kFp8E4M3 || k == CodecKind::kInt8 || k == CodecKind::kInt4;
}

// --- Top-k layout (docs/kernels.md "Top-k"). A chunk of n values is nb = ceil(n / block)
// blocks: 2 * nb fp32 magnitudes (lo, hi of block 0, then of block 1, ...), then one record
// per block at a fixed offset: the kept entries' indices, then their 2-bit codes. The index form
// is fixed by (k, block), not chosen per block, so the encoded size is a function of n alone.

// Bits of one packed index: ceil(log2(block)).
constexpr uint32_t TopKIndexBits(uint32_t block) {
  uint32_t w = 0;
  while ((uint32_t{1} << w) < block) ++w;
  return w;
}
// Packed indices when k of them take fewer bits than a bitmap of the block; a bitmap otherwise
// (ties go to the bitmap).
constexpr bool TopKPacked(Codec c) { return uint64_t{c.k} * TopKIndexBits(c.block) < c.block; }
// Entries kept in a block of len values (len == block: k; the short last block of a chunk keeps
// its share, rounded up, so at least 1).
constexpr size_t TopKCount(Codec c, size_t len) {
  return (size_t{c.k} * len + c.block - 1) / c.block;
}
constexpr size_t TopKIndexBytes(Codec c, size_t len) {
  return TopKPacked(c) ? (TopKCount(c, len) * TopKIndexBits(c.block) + 7) / 8 : (len + 7) / 8;
}
// A block's record: index section, then 2 bits per kept entry.
constexpr size_t TopKRecordBytes(Codec c, size_t len) {
  return TopKIndexBytes(c, len) + (2 * TopKCount(c, len) + 7) / 8;
}
constexpr size_t TopKBytes(Codec c, size_t n) {
  const size_t nb = (n + c.block - 1) / c.block, rest = n % c.block;
  return nb * 2 * sizeof(float) + n / c.block * TopKRecordBytes(c, c.block) +
         (rest ? TopKRecordBytes(c, rest) : 0);
}

// Bytes of the encoded form of n values (= EncodedSize in codec.h; usable from CUDA code).
constexpr size_t EncodedBytes(Codec c, size_t n) {
  const size_t scales = HasScales(c.kind) ? (n + c.block - 1) / c.block * sizeof(float) : 0;
  switch (c.kind) {
    case CodecKind::kFp32:
      return n * 4;
    case CodecKind::kBf16:
      return n * 2;
    case CodecKind::kFp8E4M3:
    case CodecKind::kInt8:
      return scales + n;
    case CodecKind::kInt4:
      return scales + (n + 1) / 2;
    case CodecKind::kTopK:
      return TopKBytes(c, n);
  }
  return 0;
}

}  // namespace diloco::kernels
