// What the top-k codec's fixed-size index form costs against delta coding, measured on real
// encodings: for each block, the gaps between kept indices Golomb-Rice coded with the best
// single parameter for the codec configuration (what a variable-size format would send, each
// block rounded up to whole bytes as the fixed form's records are), beside the fixed form's
// bytes and the information bound log2(C(block, k)).
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/codec.h"

namespace diloco::kernels {

struct IndexCost {
  double fixed_bytes = 0;  // per whole block, the format as built (packed, Elias-Fano or bitmap)
  double rice_bytes = 0;   // per whole block, mean over the blocks, best Rice parameter
  uint32_t rice_param = 0;
  double bound_bytes = 0;  // log2(C(block, k)) / 8
};

// `decoded` is Decode of a top-k encoding: its nonzero entries are the kept ones. Only whole
// blocks count.
inline IndexCost MeasureIndexCost(Codec c, std::span<const float> decoded) {
  const size_t blocks = decoded.size() / c.block;
  std::vector<std::vector<uint32_t>> gaps(blocks);
  for (size_t b = 0; b < blocks; ++b) {
    int64_t prev = -1;
    for (uint32_t i = 0; i < c.block; ++i) {
      if (decoded[b * c.block + i] == 0.0f) continue;
      gaps[b].push_back(static_cast<uint32_t>(i - prev - 1));
      prev = i;
    }
  }
  IndexCost cost;
  cost.fixed_bytes = static_cast<double>(TopKIndexBytes(c, c.block));
  cost.rice_bytes = 1e300;
  for (uint32_t r = 0; r < 12; ++r) {
    double bytes = 0;
    for (const auto& g : gaps) {
      uint64_t bits = 0;
      for (uint32_t v : g) bits += (v >> r) + 1 + r;  // unary quotient, stop bit, r low bits
      bytes += static_cast<double>((bits + 7) / 8);
    }
    bytes /= static_cast<double>(blocks ? blocks : 1);
    if (bytes < cost.rice_bytes) {
      cost.rice_bytes = bytes;
      cost.rice_param = r;
    }
  }
  cost.bound_bytes =
      (std::lgamma(c.block + 1.0) - std::lgamma(c.k + 1.0) - std::lgamma(c.block - c.k + 1.0)) /
      std::log(2.0) / 8;
  return cost;
}

}  // namespace diloco::kernels
