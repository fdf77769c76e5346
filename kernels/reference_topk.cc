#include "kernels/reference_topk.h"

#include <algorithm>
#include <cstring>
#include <numeric>
#include <vector>

#include "kernels/quant_math.h"
#include "kernels/topk.h"

namespace diloco::kernels::ref {
namespace {

bool Bit(const uint8_t* p, size_t bit) { return (p[bit / 8] >> (bit % 8)) & 1u; }
void SetBit(uint8_t* p, size_t bit) { p[bit / 8] |= static_cast<uint8_t>(1u << (bit % 8)); }

// Elias-Fano's layout (codec_kind.h), as positions: bit `Low(j, i)` is bit i of index j's low
// part; the high part starts at bit `kb * L`.
size_t Low(size_t j, uint32_t l, uint32_t i) { return j * l + i; }

// Kept indices of a block, increasing.
std::vector<uint32_t> Indices(Codec c, const uint8_t* rec, size_t len) {
  std::vector<uint32_t> idx;
  if (TopKIndexForm(c) == TopKForm::kEliasFano) {
    const size_t kb = TopKCount(c, len);
    const uint32_t l = TopKEliasFanoLow(kb, len);
    // The j-th set bit of the high part, at position p, says index j's high part is p - j.
    std::vector<uint32_t> highs;
    for (size_t p = 0; p < kb + ((len - 1) >> l); ++p)
      if (Bit(rec, kb * l + p)) highs.push_back(static_cast<uint32_t>(p - highs.size()));
    for (size_t j = 0; j < highs.size() && j < kb; ++j) {
      uint32_t v = highs[j] << l;
      for (uint32_t i = 0; i < l; ++i) v |= static_cast<uint32_t>(Bit(rec, Low(j, l, i))) << i;
      idx.push_back(v);
    }
  } else if (TopKIndexForm(c) == TopKForm::kPacked) {
    const uint32_t w = TopKIndexBits(c.block);
    for (size_t j = 0; j < TopKCount(c, len); ++j) {
      uint32_t v = 0;
      for (uint32_t i = 0; i < w; ++i) v |= static_cast<uint32_t>(Bit(rec, j * w + i)) << i;
      idx.push_back(v);
    }
  } else {
    for (uint32_t i = 0; i < len; ++i)
      if (Bit(rec, i)) idx.push_back(i);
  }
  return idx;
}

}  // namespace

void TopKEncode(Codec c, const float* x, size_t n, uint8_t* out) {
  if (n == 0) return;  // no bytes (and `out` may be null: memset's pointer must not be)
  std::memset(out, 0, EncodedBytes(c, n));
  for (size_t b = 0; b < kernels::internal::TopKBlocks(c, n); ++b) {
    const float* xb = x + b * c.block;
    const size_t len = std::min<size_t>(c.block, n - b * c.block);
    const size_t kb = TopKCount(c, len);
    // Largest |x| first, the lower index first among equals.
    std::vector<uint32_t> order(len);
    std::iota(order.begin(), order.end(), 0u);
    std::stable_sort(order.begin(), order.end(), [&](uint32_t i, uint32_t j) {
      return qm::AbsBits(xb[i]) > qm::AbsBits(xb[j]);
    });
    std::vector<uint32_t> kept(order.begin(), order.begin() + kb);
    std::sort(kept.begin(), kept.end());
    const float t = qm::BitsFloat(qm::AbsBits(xb[order[kb - 1]]));
    const float m = qm::BitsFloat(qm::AbsBits(xb[order[0]]));
    const float mid = 0.5f * t + 0.5f * m;
    double sums[2] = {0, 0};
    size_t counts[2] = {0, 0};
    for (uint32_t i : kept) {
      const float a = qm::BitsFloat(qm::AbsBits(xb[i]));
      sums[a >= mid] += a;
      ++counts[a >= mid];
    }
    const float hi = static_cast<float>(sums[1] / static_cast<double>(counts[1]));
    const float lo = counts[0] ? static_cast<float>(sums[0] / static_cast<double>(counts[0])) : hi;
    std::memcpy(out + 8 * b, &lo, 4);
    std::memcpy(out + 8 * b + 4, &hi, 4);
    uint8_t* rec = out + kernels::internal::TopKRecordOffset(c, n, b);
    const uint32_t w = TopKIndexBits(c.block), l = TopKEliasFanoLow(kb, len);
    for (size_t j = 0; j < kb; ++j) {
      switch (TopKIndexForm(c)) {
        case TopKForm::kPacked:
          for (uint32_t i = 0; i < w; ++i)
            if ((kept[j] >> i) & 1u) SetBit(rec, j * w + i);
          break;
        case TopKForm::kEliasFano:
          for (uint32_t i = 0; i < l; ++i)
            if ((kept[j] >> i) & 1u) SetBit(rec, Low(j, l, i));
          SetBit(rec, kb * l + (kept[j] >> l) + j);
          break;
        case TopKForm::kBitmap:
          SetBit(rec, kept[j]);
          break;
      }
      const float v = xb[kept[j]];
      uint8_t* codes = rec + TopKIndexBytes(c, len);
      if (qm::FloatBits(v) >> 31) SetBit(codes, 2 * j);
      if (qm::BitsFloat(qm::AbsBits(v)) >= mid) SetBit(codes, 2 * j + 1);
    }
  }
}

void TopKDecode(Codec c, const uint8_t* in, size_t n, float w, bool acc, float* out) {
  if (!acc) std::fill_n(out, n, 0.0f);
  for (size_t b = 0; b < kernels::internal::TopKBlocks(c, n); ++b) {
    const size_t len = std::min<size_t>(c.block, n - b * c.block);
    float lo, hi;
    std::memcpy(&lo, in + 8 * b, 4);
    std::memcpy(&hi, in + 8 * b + 4, 4);
    const uint8_t* rec = in + kernels::internal::TopKRecordOffset(c, n, b);
    const std::vector<uint32_t> idx = Indices(c, rec, len);
    const uint8_t* codes = rec + TopKIndexBytes(c, len);
    for (size_t j = 0; j < idx.size(); ++j) {
      const float mag = Bit(codes, 2 * j + 1) ? hi : lo;
      const float v = Bit(codes, 2 * j) ? -mag : mag;
      float& o = out[b * c.block + idx[j]];
      o = acc ? o + w * v : v;
    }
  }
}

}  // namespace diloco::kernels::ref
