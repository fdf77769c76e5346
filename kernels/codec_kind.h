// The codec descriptor (kind + block size, and k for the sparse top-k codec), split out of
// codec.h so that CUDA translation units (compiled as C++17, without <span> or Abseil) can name
// it too. Include codec.h in C++ code; everything else C++ code asks of a codec is its entry in
// the codec table (codec_table.h). The constexpr HasScales, IsTopK and EncodedBytes below are
// for CUDA code, which cannot read the table; kernels_codec_table_test keeps them equal to it.
#pragma once

#include <cstddef>
#include <cstdint>

namespace diloco::kernels {

// kTopK and kTopKPacked are the sparse codecs (kernels/topk.h), CPU only. They differ only in how
// a block's kept indices are written: kTopK (`topk`) in the smallest of three fixed-size forms,
// Elias-Fano among them; kTopKPacked (`topk-packed`, the first form, 2026-12-03) packed or a
// bitmap. Kind 5 stays readable so that workers of either kind push to the same shard.
enum class CodecKind : uint8_t {
  kFp32 = 0,
  kBf16 = 1,
  kFp8E4M3 = 2,
  kInt8 = 3,
  kInt4 = 4,
  kTopKPacked = 5,
  kTopK = 6
};

constexpr bool IsTopK(CodecKind k) { return k == CodecKind::kTopK || k == CodecKind::kTopKPacked; }

struct Codec {
  CodecKind kind = CodecKind::kInt8;
  uint32_t block = 256;
  // Top-k kinds only: entries kept per full block, in [1, block]; 0 for every other kind.
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
// is fixed by the codec (kind, k, block), not chosen per block, and each form's size is a
// function of (kept entries, block length), so the encoded size is a function of n alone.
//   kBitmap: len bits, bit i marks entry i.
//   kPacked: kb fields of ceil(log2(block)) bits, the indices in increasing order.
//   kEliasFano: with L = TopKEliasFanoLow(kb, len), kb fields of L bits (each index's low bits,
//     in increasing order of index), then kb + ((len - 1) >> L) bits in which the j-th kept
//     index (from 0) sets bit (index >> L) + j: about 2 + log2(len / kb) bits per index, within
//     a few percent of delta-coded gaps (benchmarks/kernels/RESULTS.md "Top-k pushes") at a fixed
//     size.
enum class TopKForm : uint8_t { kBitmap, kPacked, kEliasFano };

// Bits of one packed index: ceil(log2(block)).
constexpr uint32_t TopKIndexBits(uint32_t block) {
  uint32_t w = 0;
  while ((uint32_t{1} << w) < block) ++w;
  return w;
}
// Entries kept in a block of len values (len == block: k; the short last block of a chunk keeps
// its share, rounded up, so at least 1).
constexpr size_t TopKCount(Codec c, size_t len) {
  return (size_t{c.k} * len + c.block - 1) / c.block;
}
// Elias-Fano's low bits per index for kb of len: the largest L with kb * 2^L <= len.
constexpr uint32_t TopKEliasFanoLow(size_t kb, size_t len) {
  uint32_t l = 0;
  while (kb > 0 && (kb << (l + 1)) <= len) ++l;
  return l;
}
constexpr size_t TopKEliasFanoBits(size_t kb, size_t len) {
  const uint32_t l = TopKEliasFanoLow(kb, len);
  return kb * l + kb + ((len - 1) >> l);
}
// The form of the codec's index sections, chosen on a full block: kTopKPacked packed when k
// fields take fewer bits than the block, else the bitmap; kTopK the smallest of the three (ties
// to the bitmap, then to packed).
constexpr TopKForm TopKIndexForm(Codec c) {
  const uint64_t bitmap = c.block, packed = uint64_t{c.k} * TopKIndexBits(c.block);
  if (c.kind == CodecKind::kTopKPacked)
    return packed < bitmap ? TopKForm::kPacked : TopKForm::kBitmap;
  const uint64_t ef = TopKEliasFanoBits(c.k, c.block);
  if (ef < packed && ef < bitmap) return TopKForm::kEliasFano;
  return packed < bitmap ? TopKForm::kPacked : TopKForm::kBitmap;
}
constexpr size_t TopKIndexBytes(Codec c, size_t len) {
  const size_t kb = TopKCount(c, len);
  switch (TopKIndexForm(c)) {
    case TopKForm::kPacked:
      return (kb * TopKIndexBits(c.block) + 7) / 8;
    case TopKForm::kEliasFano:
      return (TopKEliasFanoBits(kb, len) + 7) / 8;
    case TopKForm::kBitmap:
      break;
  }
  return (len + 7) / 8;
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
    case CodecKind::kTopKPacked:
    case CodecKind::kTopK:
      return TopKBytes(c, n);
  }
  return 0;
}

}  // namespace diloco::kernels
