// CUDA kernels of the GPT layers (fp32 activations), the CUDA twins of layers.h. Matrix
// products are not here: they go through cuBLAS (gpt_cuda.cu). Every launcher enqueues on
// `stream` and never synchronises. Backward kernels accumulate (+=) like the CPU ones.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace diloco::model::cuda {

void EncoderForward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B,
                    int T, int C, cudaStream_t s);
void EncoderBackward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B, int T,
                     int C, cudaStream_t s);
void LayerNormForward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                      const float* b, int N, int C, cudaStream_t s);
void LayerNormBackward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                       const float* w, const float* mean, const float* rstd, int N, int C,
                       cudaStream_t s);
// out[n, :] = bias (the bias of a Linear, before a beta=1 GEMM).
void BroadcastRows(float* out, const float* bias, int N, int OC, cudaStream_t s);
// dbias += column sums of dout (N, OC).
void BiasBackward(float* dbias, const float* dout, int N, int OC, cudaStream_t s);
// qkv (B,T,3C) -> q, k, v each (B,NH,T,hs); and the reverse for gradients (overwrites dqkv).
void SplitHeads(float* q, float* k, float* v, const float* qkv, int B, int T, int C, int NH,
                cudaStream_t s);
void MergeQkvGrads(float* dqkv, const float* dq, const float* dk, const float* dv, int B, int T,
                   int C, int NH, cudaStream_t s);
// y (B,NH,T,hs) -> out (B,T,C) and back.
void MergeHeads(float* out, const float* y, int B, int T, int C, int NH, cudaStream_t s);
void SplitHeadsGrad(float* dy, const float* dout, int B, int T, int C, int NH, cudaStream_t s);
// Causal softmax over rows of (rows, T) score matrices, in place; rows are (B*NH*T).
void CausalSoftmaxForward(float* att, int BNH, int T, cudaStream_t s);
// datt := att * (datt - rowsum(att * datt)) below the diagonal, 0 above; in place.
void CausalSoftmaxBackward(float* datt, const float* att, int BNH, int T, cudaStream_t s);
void GeluForward(float* out, const float* inp, int64_t n, cudaStream_t s);
void GeluBackward(float* dinp, const float* inp, const float* dout, int64_t n, cudaStream_t s);
void ResidualForward(float* out, const float* a, const float* b, int64_t n, cudaStream_t s);
void ResidualBackward(float* da, float* db, const float* dout, int64_t n, cudaStream_t s);
// probs, losses; *loss_sum += sum of losses * loss_scale.
void CrossEntropyForward(float* probs, float* losses, float* loss_sum, const float* logits,
                         const int32_t* targets, int N, int V, float loss_scale, cudaStream_t s);
void CrossEntropyBackward(float* dlogits, const float* probs, const int32_t* targets, int N, int V,
                          float scale, cudaStream_t s);
// *out += sum of squares of x.
void SumSquares(float* out, const float* x, int64_t n, cudaStream_t s);
// AdamW on one tensor. The gradient is first multiplied by grad_scale and by
// min(1, clip / sqrt(*sumsq * grad_scale^2)) when clip > 0 (global-norm clipping with the norm
// read on the device: no host synchronisation).
void AdamW(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
           float beta2, float eps, float weight_decay, float bc1, float bc2, float grad_scale,
           float clip, const float* sumsq, cudaStream_t s);

}  // namespace diloco::model::cuda
