// Causal self-attention that streams (the CUDA twin of attention.cc's forward and backward, for
// one layer's heads): y = softmax(scale q k^T, causal) v is computed key tile by key tile with an
// online softmax (running maximum and sum per query row), so the (T x T) scores are never stored;
// the forward keeps only each row's log-sum-exp, from which the backward recomputes the scores
// tile by tile. Memory per layer: B x NH x T floats instead of B x NH x T x T, and no cuBLAS
// calls. fp32 throughout (accumulation in fp32; expf/logf, not the fast intrinsics), so it
// agrees with the CPU model to float rounding.
//
// Layouts: q, k, v, y, dy, dq, dk, dv are (BNH, T, hs), contiguous (gpt_cuda.cu's head split);
// lse and dsum are (BNH, T). One thread owns one query row (forward, dq) or one key row (dk, dv);
// the rows of the other side stream through shared memory in tiles, read by every thread of the
// block at the same address (a broadcast). Head sizes up to 128; FlashAttentionSupports says.
#pragma once

#include <cuda_runtime.h>

namespace diloco::model::cuda {

// Whether these kernels take head size hs (1..128).
bool FlashAttentionSupports(int hs);

// y and lse (overwritten) from q, k, v.
void FlashAttentionForward(float* y, float* lse, const float* q, const float* k, const float* v,
                           int BNH, int T, int hs, float scale, cudaStream_t s);

// dq, dk, dv (overwritten) from dy and the forward's q, k, v, y and lse; dsum is scratch of
// BNH x T floats (each row's dy . y).
void FlashAttentionBackward(float* dq, float* dk, float* dv, float* dsum, const float* q,
                            const float* k, const float* v, const float* y, const float* lse,
                            const float* dy, int BNH, int T, int hs, float scale, cudaStream_t s);

}  // namespace diloco::model::cuda
