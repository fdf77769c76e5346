// The sparse top-k codecs (CodecKind::kTopK, kTopKPacked): per block of a worker's error-fed delta,
// only the k entries of largest magnitude travel, each as 2 bits; what is not sent stays in the
// error feedback residual. For pushes: at 2% of a 2048 block it is 0.028 bytes per value, against
// 0.5 for int4 (benchmarks/kernels/RESULTS.md, "Top-k pushes").
//
// Per block of len values with kb = TopKCount(c, len) kept entries (codec_kind.h):
//   * which entries: the kb largest by |x|, ties to the lower index (a strict order on the pair
//     (|x| bits, index), so the choice never depends on the selection algorithm);
//   * their values, sign + one of two magnitudes: t and M the smallest and largest kept |x|,
//     mid = t/2 + M/2; an entry is "high" when |x| >= mid; hi = the mean |x| of the high
//     entries, lo = the mean of the others (hi when there are none); the code is bit 0 = sign
//     (1: negative), bit 1 = high; deQ = +-(high ? hi : lo). Why not a symmetric grid
//     {+-0.5, +-1.5} x scale: every kept magnitude lies in [t, M], a narrow band at the top of
//     the block, so half of such a grid is wasted on magnitudes that never occur; two means
//     inside the band err by at most (M - t) / 2 per entry (the grid with scale M / 1.5 by up to
//     M / 3 ~ t/2 for a Gaussian block at 2%), for 4 more bytes per block;
//   * indices, in one of three forms fixed by the codec (TopKIndexForm, codec_kind.h): a bitmap
//     of len bits (bit i of byte i/8 marks entry i); packed, kb fields of ceil(log2(block))
//     bits, LSB first, in increasing order; or Elias-Fano, kb low fields of L bits then a high
//     part in which the j-th index sets bit (index >> L) + j (about 2 + log2(len / kb) bits per
//     index: 39 B per block at topk:0.02, block 2048, against 57 packed). kTopKPacked chooses
//     packed or bitmap (its wire form since 2026-12-03), kTopK the smallest of the three. Not
//     delta coding (what was asked for first): a size fixed by n keeps EncodedBytes exact, so
//     chunking, payload checks and the shard's buffers work unchanged; Elias-Fano comes within
//     a few percent of Rice-coded gaps at that fixed size (benchmarks/kernels/RESULTS.md "Top-k
//     pushes").
//   * codes: 2 bits per kept entry in index order, LSB first (4 per byte).
// Padding bits are zero. Encode writes the block's lo, hi at bytes [8b, 8b + 8) of the chunk and
// its record at 8 nb + b * TopKRecordBytes(c, block).
//
// Internal: codec.h and reference.h are the public entry points.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "absl/status/status.h"
#include "kernels/codec_kind.h"

namespace diloco::kernels::internal {

inline size_t TopKBlocks(Codec c, size_t n) { return (n + c.block - 1) / c.block; }
// Byte offset of block b's record in a chunk of n values.
inline size_t TopKRecordOffset(Codec c, size_t n, size_t b) {
  return TopKBlocks(c, n) * 2 * sizeof(float) + b * TopKRecordBytes(c, c.block);
}

// Blocks [b0, b1) of an n-value chunk; `enc` is the whole chunk's encoding. x finite.
void TopKEncodeBlocks(Codec c, const float* x, size_t n, size_t b0, size_t b1, uint8_t* enc);
// out = deQ (acc false: every value of the blocks written, unsent ones 0) or out += w * deQ for
// the sent entries only (acc true). `enc` must have passed CheckTopK.
void TopKDecodeBlocks(Codec c, const uint8_t* enc, size_t n, size_t b0, size_t b1, float w,
                      bool acc, float* out);
// Per block: err += delta; encode err; err -= deQ (only the sent entries change again).
void TopKErrorFeedbackBlocks(Codec c, const float* delta, float* err, size_t n, size_t b0,
                             size_t b1, uint8_t* enc);

// Everything a decoder relies on, checked before any value is read: lo and hi finite and >= 0;
// a bitmap marks exactly kb entries, none past the block's end; an Elias-Fano high part marks
// exactly kb; packed and Elias-Fano indices lie in the block and strictly increase (so none
// repeats). `in` must already be EncodedBytes(c, n) long. The
// error names the block and the cause.
absl::Status CheckTopK(Codec c, std::span<const uint8_t> in, size_t n);

}  // namespace diloco::kernels::internal
