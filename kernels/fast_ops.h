// The fast CPU kernels as a table of plain functions over a range of blocks (or elements), one
// table per instruction set. Its codec functions serve the dense codecs only (the codec table,
// codec_table.h, sends top-k to topk.h). fast_impl.inc holds the loops once; fast_generic.cc,
// fast_avx2.cc and fast_avx512.cc compile it with different -m flags, and Ops() picks the best
// table the running CPU supports (runtime dispatch). The public functions in codec.h / optim.h
// validate arguments, split work over the thread pool, and call these.
//
// All loops use only the per-value math of quant_math.h and IEEE-exact operations with FMA
// contraction off, so every table produces the same bytes as the scalar reference.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/codec_kind.h"
#include "kernels/optim_params.h"

namespace diloco::kernels::internal {

struct FastOps {
  const char* isa;
  // max over i of AbsBits(x[i]) (or of AbsBits(a[i] + b[i])): >= qm::kInfBits means non-finite.
  uint32_t (*abs_max_bits)(const float* x, size_t n);
  uint32_t (*abs_max_sum_bits)(const float* a, const float* b, size_t n);
  // Blocks [b0, b1) of an n-value array. `enc` points at the whole encoding.
  void (*encode)(Codec c, const float* x, size_t n, size_t b0, size_t b1, uint8_t* enc);
  // out = deQ (accumulate = false) or out += weight * deQ (accumulate = true).
  void (*decode)(Codec c, const uint8_t* enc, size_t n, size_t b0, size_t b1, float weight,
                 bool accumulate, float* out);
  void (*error_feedback)(Codec c, const float* delta, float* err, size_t n, size_t b0, size_t b1,
                         uint8_t* enc);
  // Element ranges [0, n) of already-offset pointers.
  void (*nesterov)(NesterovParams p, float* theta, float* m, const float* d, size_t n);
  void (*adamw)(AdamWParams p, float bc1, float bc2, float* param, const float* grad, float* m,
                float* v, size_t n);
  void (*delta)(const float* anchor, const float* local, float* delta, size_t n);
  void (*lerp)(const float* global, float* local, float alpha, size_t n);
};

const FastOps& GenericOps();
const FastOps& Avx2Ops();
const FastOps& Avx512Ops();
// The best table for this CPU (chosen once).
const FastOps& Ops();

// The dense codecs' (fp32, bf16, fp8, int8, int4) fast kernels through Ops(), as the codec table
// (codec_table.h) points at them.
void DenseEncodeBlocks(Codec c, const float* x, size_t n, size_t b0, size_t b1, uint8_t* enc);
void DenseDecodeBlocks(Codec c, const uint8_t* enc, size_t n, size_t b0, size_t b1, float w,
                       bool acc, float* out);
void DenseErrorFeedbackBlocks(Codec c, const float* delta, float* err, size_t n, size_t b0,
                              size_t b1, uint8_t* enc);

}  // namespace diloco::kernels::internal
