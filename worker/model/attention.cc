// Causal self-attention as batched GEMMs per (batch, head): scores = q k^T / sqrt(hs), a causal
// softmax in place, out = att v. The strided q/k/v slices of qkv are passed to BLAS through
// their leading dimension (3C), so nothing is copied. The (batch, head) pairs run on the CPU
// trainer's threads (cpu_threads.h); their products are then not split further.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "worker/model/cpu_threads.h"
#include "worker/model/fast_f32.h"
#include "worker/model/layers.h"

namespace diloco::model {

namespace {

// fn(b, h, slot) for every (batch, head) pair, the pairs in contiguous blocks (several per
// thread) on the CPU trainer's threads; `slot` is the running thread's (cpu_threads.h). Each pair
// writes only its own slices of the outputs. With `slots` below the pool's width (too little
// scratch), one pair after the other in slot 0.
template <typename Fn>
void ForEachHead(int B, int NH, int slots, const Fn& fn) {
  const int pairs = B * NH;
  if (slots < CpuThreads()) {
    for (int bh = 0; bh < pairs; ++bh) fn(bh / NH, bh % NH, 0);
    return;
  }
  const int parts = std::max(1, std::min(kPartsPerThread * CpuThreads(), pairs));
  const int per = (pairs + parts - 1) / parts;
  ParallelForSlots(parts, [&](int p, int slot) {
    for (int bh = p * per; bh < std::min(pairs, (p + 1) * per); ++bh) fn(bh / NH, bh % NH, slot);
  });
}

}  // namespace

template <typename F>
void AttentionForward(F* out, F* att, const F* qkv, int B, int T, int C, int NH) {
  const int hs = C / NH, C3 = 3 * C;
  const F scale = F(1) / std::sqrt(F(hs));
  ForEachHead(B, NH, CpuThreads(), [&](int b, int h, int) {
    const F* q = qkv + int64_t(b) * T * C3 + h * hs;
    const F* k = q + C;
    const F* v = q + 2 * C;
    F* a = att + (int64_t(b) * NH + h) * T * T;
    Gemm<F>(false, true, T, T, hs, scale, q, C3, k, C3, F(0), a, T);
    for (int i = 0; i < T; ++i) {
      F* row = a + int64_t(i) * T;
      if constexpr (std::is_same_v<F, float>) {
        f32::SoftmaxRow(row, i + 1);
        for (int j = i + 1; j < T; ++j) row[j] = 0;
        continue;
      }
      F mx = row[0];
      for (int j = 1; j <= i; ++j) mx = row[j] > mx ? row[j] : mx;
      F sum = 0;
      for (int j = 0; j <= i; ++j) sum += (row[j] = std::exp(row[j] - mx));
      const F inv = F(1) / sum;
      for (int j = 0; j <= i; ++j) row[j] *= inv;
      for (int j = i + 1; j < T; ++j) row[j] = 0;
    }
    Gemm<F>(false, false, T, hs, T, F(1), a, T, v, C3, F(0), out + int64_t(b) * T * C + h * hs, C);
  });
}

template <typename F>
void AttentionBackward(F* dqkv, F* scratch, const F* dout, const F* qkv, const F* att, int B, int T,
                       int C, int NH, int scratch_parts) {
  const int hs = C / NH, C3 = 3 * C;
  const F scale = F(1) / std::sqrt(F(hs));
  ForEachHead(B, NH, scratch_parts, [&](int b, int h, int slot) {
    const int64_t off = int64_t(b) * T * C3 + h * hs;
    const F *q = qkv + off, *k = q + C, *v = q + 2 * C;
    F *dq = dqkv + off, *dk = dq + C, *dv = dq + 2 * C;
    const F* a = att + (int64_t(b) * NH + h) * T * T;
    const F* dy = dout + int64_t(b) * T * C + h * hs;
    F* da = scratch + int64_t(slot) * T * T;
    Gemm<F>(false, true, T, T, hs, F(1), dy, C, v, C3, F(0), da, T);  // datt = dy v^T
    Gemm<F>(true, false, T, hs, T, F(1), a, T, dy, C, F(1), dv, C3);  // dv += att^T dy
    // Softmax backward in place: dpre = att * (datt - sum_j att * datt), zero above diagonal.
    for (int i = 0; i < T; ++i) {
      const F* ar = a + int64_t(i) * T;
      F* dr = da + int64_t(i) * T;
      F dot = 0;
      for (int j = 0; j <= i; ++j) dot += ar[j] * dr[j];
      for (int j = 0; j <= i; ++j) dr[j] = ar[j] * (dr[j] - dot);
      for (int j = i + 1; j < T; ++j) dr[j] = 0;
    }
    Gemm<F>(false, false, T, hs, T, scale, da, T, k, C3, F(1), dq, C3);  // dq += s dpre k
    Gemm<F>(true, false, T, hs, T, scale, da, T, q, C3, F(1), dk, C3);   // dk += s dpre^T q
  });
}

#define DILOCO_INSTANTIATE(F)                                              \
  template void AttentionForward<F>(F*, F*, const F*, int, int, int, int); \
  template void AttentionBackward<F>(F*, F*, const F*, const F*, const F*, int, int, int, int, int);
DILOCO_INSTANTIATE(float)
DILOCO_INSTANTIATE(double)
#undef DILOCO_INSTANTIATE

}  // namespace diloco::model
