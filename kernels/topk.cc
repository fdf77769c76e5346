// The fast CPU top-k codec, one block at a time (the thread pool spreads blocks; codec.cc).
// Selection is std::nth_element on 64-bit keys (|x| bits above the inverted index), a strict
// order, so the kept set equals the reference's full sort (kernels/reference.cc).
#include "kernels/topk.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "absl/strings/str_cat.h"
#include "kernels/quant_math.h"

namespace diloco::kernels::internal {
namespace {

struct Magnitudes {
  float lo, hi, mid;
};

// lo, hi and the split point of the kept entries idx[0, kb) (increasing) of x.
Magnitudes KeptMagnitudes(const float* x, const uint32_t* idx, size_t kb) {
  uint32_t tb = qm::kInfBits, mb = 0;
  for (size_t j = 0; j < kb; ++j) {
    tb = std::min(tb, qm::AbsBits(x[idx[j]]));
    mb = std::max(mb, qm::AbsBits(x[idx[j]]));
  }
  const float mid = 0.5f * qm::BitsFloat(tb) + 0.5f * qm::BitsFloat(mb);
  double sum_lo = 0, sum_hi = 0;
  size_t n_hi = 0;
  for (size_t j = 0; j < kb; ++j) {
    const float a = qm::BitsFloat(qm::AbsBits(x[idx[j]]));
    if (a >= mid) {
      sum_hi += a;
      ++n_hi;
    } else {
      sum_lo += a;
    }
  }
  const float hi = static_cast<float>(sum_hi / static_cast<double>(n_hi));
  const float lo = n_hi == kb ? hi : static_cast<float>(sum_lo / static_cast<double>(kb - n_hi));
  return {lo, hi, mid};
}

// Writes the w-bit field j of an LSB-first bit stream (zeroed beforehand).
void PutBits(uint8_t* p, size_t j, uint32_t w, uint32_t v) {
  const size_t pos = j * w;
  for (uint32_t i = 0; i < w; ++i) {
    const size_t bit = pos + i;
    p[bit / 8] |= static_cast<uint8_t>(((v >> i) & 1u) << (bit % 8));
  }
}

// Reads the w-bit field j (w <= 24): only the bytes the field covers, so never past the stream.
uint32_t GetBits(const uint8_t* p, size_t j, uint32_t w) {
  if (w == 0) return 0;
  const size_t pos = j * w, first = pos / 8, last = (pos + w - 1) / 8;
  uint32_t window = 0;
  for (size_t b = first; b <= last; ++b) window |= uint32_t{p[b]} << (8 * (b - first));
  return (window >> (pos % 8)) & ((uint32_t{1} << w) - 1);
}

// Byte `byte` of a bit stream with the bits outside [begin, end) cleared.
uint32_t MaskedByte(const uint8_t* p, size_t byte, size_t begin, size_t end) {
  uint32_t bits = p[byte];
  if (byte * 8 < begin) bits &= ~0u << (begin % 8);
  if (byte * 8 + 8 > end) bits &= (1u << (end - byte * 8)) - 1;
  return bits;
}

// Set bits of a bit stream in [begin, end).
size_t CountBits(const uint8_t* p, size_t begin, size_t end) {
  size_t n = 0;
  for (size_t byte = begin / 8; byte * 8 < end; ++byte)
    n += __builtin_popcount(MaskedByte(p, byte, begin, end));
  return n;
}

// Calls f(i, position - begin) for the set bits of [begin, end) in order, i counting them, and
// stops after `limit`; returns how many it visited. A byte at a time (the Elias-Fano high part,
// the bitmap).
template <typename F>
size_t ForEachSetBit(const uint8_t* p, size_t begin, size_t end, size_t limit, F&& f) {
  size_t i = 0;
  for (size_t byte = begin / 8; byte * 8 < end && i < limit; ++byte) {
    for (uint32_t bits = MaskedByte(p, byte, begin, end); bits != 0 && i < limit;
         bits &= bits - 1) {
      f(i, byte * 8 + __builtin_ctz(bits) - begin);
      ++i;
    }
  }
  return i;
}

// Elias-Fano (codec_kind.h): the kb sorted indices of a block of len into rec (zeroed).
void PutEliasFano(uint8_t* rec, const uint32_t* idx, size_t kb, size_t len) {
  const uint32_t l = TopKEliasFanoLow(kb, len);
  const uint32_t mask = (uint32_t{1} << l) - 1;
  for (size_t j = 0; j < kb; ++j) {
    PutBits(rec, j, l, idx[j] & mask);
    const size_t bit = kb * l + (idx[j] >> l) + j;
    rec[bit / 8] |= static_cast<uint8_t>(1u << (bit % 8));
  }
}

// Decodes up to kb Elias-Fano indices into idx (as the set bits of the high part come); returns
// how many the high part's kb + ((len - 1) >> L) bits mark, at most kb. An index past the block
// or out of order is the caller's to refuse (CheckTopK).
size_t ReadEliasFano(const uint8_t* rec, size_t kb, size_t len, uint32_t* idx) {
  const uint32_t l = TopKEliasFanoLow(kb, len);
  const size_t base = kb * l;
  return ForEachSetBit(rec, base, base + kb + ((len - 1) >> l), kb, [&](size_t j, size_t p) {
    idx[j] = static_cast<uint32_t>(((p - j) << l) | GetBits(rec, j, l));
  });
}

// Kept indices of block b (increasing) into idx; returns how many it read (kb for a record that
// passed CheckTopK).
size_t ReadIndices(Codec c, const uint8_t* rec, size_t len, uint32_t* idx) {
  const size_t kb = TopKCount(c, len);
  switch (TopKIndexForm(c)) {
    case TopKForm::kPacked: {
      const uint32_t w = TopKIndexBits(c.block);
      for (size_t j = 0; j < kb; ++j) idx[j] = GetBits(rec, j, w);
      return kb;
    }
    case TopKForm::kEliasFano:
      return ReadEliasFano(rec, kb, len, idx);
    case TopKForm::kBitmap:
      break;
  }
  return ForEachSetBit(rec, 0, len, kb,
                       [&](size_t j, size_t p) { idx[j] = static_cast<uint32_t>(p); });
}

void EncodeBlock(Codec c, const float* x, size_t n, size_t b, uint8_t* enc) {
  const size_t lo = b * c.block;
  const size_t len = std::min<size_t>(c.block, n - lo);
  const size_t kb = TopKCount(c, len);
  const float* xb = x + lo;
  uint64_t keys[kMaxBlock];
  for (size_t i = 0; i < len; ++i) {
    keys[i] = (uint64_t{qm::AbsBits(xb[i])} << 32) | (0xFFFFFFFFu - static_cast<uint32_t>(i));
  }
  std::nth_element(keys, keys + kb - 1, keys + len, std::greater<uint64_t>());
  uint32_t idx[kMaxBlock];
  for (size_t j = 0; j < kb; ++j) idx[j] = 0xFFFFFFFFu - static_cast<uint32_t>(keys[j]);
  std::sort(idx, idx + kb);

  const Magnitudes m = KeptMagnitudes(xb, idx, kb);
  std::memcpy(enc + b * 8, &m.lo, 4);
  std::memcpy(enc + b * 8 + 4, &m.hi, 4);
  uint8_t* rec = enc + TopKRecordOffset(c, n, b);
  std::memset(rec, 0, TopKRecordBytes(c, len));
  switch (TopKIndexForm(c)) {
    case TopKForm::kPacked: {
      const uint32_t w = TopKIndexBits(c.block);
      for (size_t j = 0; j < kb; ++j) PutBits(rec, j, w, idx[j]);
      break;
    }
    case TopKForm::kEliasFano:
      PutEliasFano(rec, idx, kb, len);
      break;
    case TopKForm::kBitmap:
      for (size_t j = 0; j < kb; ++j) rec[idx[j] / 8] |= static_cast<uint8_t>(1u << (idx[j] % 8));
      break;
  }
  uint8_t* codes = rec + TopKIndexBytes(c, len);
  for (size_t j = 0; j < kb; ++j) {
    const float v = xb[idx[j]];
    const uint32_t code =
        (qm::FloatBits(v) >> 31) | (qm::BitsFloat(qm::AbsBits(v)) >= m.mid ? 2u : 0u);
    codes[j / 4] |= static_cast<uint8_t>(code << (2 * (j % 4)));
  }
}

// Calls f(i, deQ_i) for each sent entry of block b, i relative to the block.
template <typename F>
void ForEachSent(Codec c, const uint8_t* enc, size_t n, size_t b, F&& f) {
  const size_t len = std::min<size_t>(c.block, n - b * c.block);
  float lo, hi;
  std::memcpy(&lo, enc + b * 8, 4);
  std::memcpy(&hi, enc + b * 8 + 4, 4);
  const uint8_t* rec = enc + TopKRecordOffset(c, n, b);
  uint32_t idx[kMaxBlock];
  const size_t kb = ReadIndices(c, rec, len, idx);
  const uint8_t* codes = rec + TopKIndexBytes(c, len);
  for (size_t j = 0; j < kb; ++j) {
    const uint32_t code = (codes[j / 4] >> (2 * (j % 4))) & 3u;
    const float mag = (code & 2u) ? hi : lo;
    f(idx[j], (code & 1u) ? -mag : mag);
  }
}

}  // namespace

void TopKEncodeBlocks(Codec c, const float* x, size_t n, size_t b0, size_t b1, uint8_t* enc) {
  for (size_t b = b0; b < b1; ++b) EncodeBlock(c, x, n, b, enc);
}

void TopKDecodeBlocks(Codec c, const uint8_t* enc, size_t n, size_t b0, size_t b1, float w,
                      bool acc, float* out) {
  for (size_t b = b0; b < b1; ++b) {
    float* o = out + b * c.block;
    if (acc) {
      ForEachSent(c, enc, n, b, [&](size_t i, float v) { o[i] = o[i] + w * v; });
    } else {
      std::fill_n(o, std::min<size_t>(c.block, n - b * c.block), 0.0f);
      ForEachSent(c, enc, n, b, [&](size_t i, float v) { o[i] = v; });
    }
  }
}

void TopKErrorFeedbackBlocks(Codec c, const float* delta, float* err, size_t n, size_t b0,
                             size_t b1, uint8_t* enc) {
  for (size_t b = b0; b < b1; ++b) {
    const size_t lo = b * c.block;
    const size_t len = std::min<size_t>(c.block, n - lo);
    for (size_t i = lo; i < lo + len; ++i) err[i] = err[i] + delta[i];
    EncodeBlock(c, err, n, b, enc);
    float* e = err + lo;
    ForEachSent(c, enc, n, b, [&](size_t i, float v) { e[i] = e[i] - v; });
  }
}

absl::Status CheckTopK(Codec c, std::span<const uint8_t> in, size_t n) {
  const size_t nb = TopKBlocks(c, n);
  for (size_t b = 0; b < nb; ++b) {
    uint32_t s[2];
    std::memcpy(s, in.data() + b * 8, 8);
    if (std::max(s[0], s[1]) >= qm::kInfBits) {  // a set sign bit sorts above +Inf too
      return absl::InvalidArgumentError(
          absl::StrCat("topk block ", b, " has a negative or non-finite magnitude (lo, hi) = (",
                       qm::BitsFloat(s[0]), ", ", qm::BitsFloat(s[1]), ")"));
    }
    const size_t len = std::min<size_t>(c.block, n - b * c.block);
    const size_t kb = TopKCount(c, len);
    const uint8_t* rec = in.data() + TopKRecordOffset(c, n, b);
    const TopKForm form = TopKIndexForm(c);
    if (form == TopKForm::kEliasFano) {
      const uint32_t l = TopKEliasFanoLow(kb, len);
      const size_t marked = CountBits(rec, kb * l, kb * l + kb + ((len - 1) >> l));
      if (marked != kb) {
        return absl::InvalidArgumentError(absl::StrCat("topk block ", b,
                                                       ": Elias-Fano high bits mark ", marked,
                                                       " entries, the codec keeps ", kb));
      }
    }
    if (form != TopKForm::kBitmap) {
      uint32_t idx[kMaxBlock];
      const size_t read = ReadIndices(c, rec, len, idx);  // kb: the count was checked above
      for (size_t j = 0; j < read; ++j) {
        const uint32_t i = idx[j];
        if (i >= len) {
          return absl::InvalidArgumentError(absl::StrCat(
              "topk block ", b, ": index ", i, " out of range for a block of ", len, " values"));
        }
        if (j > 0 && i <= idx[j - 1]) {
          return absl::InvalidArgumentError(
              absl::StrCat("topk block ", b, ": index ", i, " at position ", j,
                           " repeats or is out of order (indices must increase)"));
        }
      }
    } else {
      const size_t marked = CountBits(rec, 0, len);
      if (len % 8 != 0 && (rec[len / 8] >> (len % 8)) != 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "topk block ", b, ": bitmap marks an entry past the block's ", len, " values"));
      }
      if (marked != kb) {
        return absl::InvalidArgumentError(absl::StrCat("topk block ", b, ": bitmap marks ", marked,
                                                       " entries, the codec keeps ", kb));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace diloco::kernels::internal
