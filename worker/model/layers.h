// The GPT-2 layers on the CPU, each a forward/backward pair in the style of llm.c's
// train_gpt2.c. Templated on the float type: the trainer runs float (OpenBLAS sgemm), and the
// gradient checks run the very same code in double (dgemm) against finite differences.
//
// Conventions: activations are row-major with N = B*T rows; weight matrices are [out, in]
// row-major (torch.nn.Linear). Every backward ACCUMULATES (+=) into its gradient outputs, so a
// tensor used twice (wte: embedding and LM head) sums both contributions; callers zero the
// gradient buffers before a backward pass. Where a `dinp_overwrite` flag exists, true writes
// dinp (=) instead: the model uses it for activation gradients with a single producer, so that
// it need not clear them every step.
#pragma once

#include <cstdint>

namespace diloco::model {

// C[M,N] = alpha * op(A) op(B) + beta * C, row-major, op = transpose when the flag is set.
template <typename F>
void Gemm(bool trans_a, bool trans_b, int M, int N, int K, F alpha, const F* A, int lda, const F* B,
          int ldb, F beta, F* C, int ldc);

// out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]
template <typename F>
void EncoderForward(F* out, const int32_t* inp, const F* wte, const F* wpe, int B, int T, int C);
template <typename F>
void EncoderBackward(F* dwte, F* dwpe, const F* dout, const int32_t* inp, int B, int T, int C);

// out = (inp - mean) * rstd * w + b over the last dimension; saves mean and rstd (N each).
template <typename F>
void LayerNormForward(F* out, F* mean, F* rstd, const F* inp, const F* w, const F* b, int N, int C);
template <typename F>
void LayerNormBackward(F* dinp, F* dw, F* db, const F* dout, const F* inp, const F* w,
                       const F* mean, const F* rstd, int N, int C);

// out[N,OC] = inp[N,C] w[OC,C]^T + bias (bias may be null).
template <typename F>
void LinearForward(F* out, const F* inp, const F* w, const F* bias, int N, int C, int OC);
template <typename F>
void LinearBackward(F* dinp, F* dw, F* dbias, const F* dout, const F* inp, const F* w, int N, int C,
                    int OC, bool dinp_overwrite = false);

// Causal multi-head self-attention. qkv is (B,T,3C) = [q | k | v], heads are contiguous slices
// of C/NH channels; att (B,NH,T,T) keeps the softmax probabilities for the backward pass;
// out is (B,T,C). scratch holds scratch_parts * T*T values: the backward runs its (batch, head)
// pairs on the CPU trainer's threads (cpu_threads.h), a T*T slice per thread, when scratch_parts
// is at least CpuThreads(), and one after the other otherwise.
template <typename F>
void AttentionForward(F* out, F* att, const F* qkv, int B, int T, int C, int NH);
template <typename F>
void AttentionBackward(F* dqkv, F* scratch, const F* dout, const F* qkv, const F* att, int B, int T,
                       int C, int NH, int scratch_parts = 1);

// GELU, tanh approximation (as GPT-2).
template <typename F>
void GeluForward(F* out, const F* inp, int64_t n);
template <typename F>
void GeluBackward(F* dinp, const F* inp, const F* dout, int64_t n, bool dinp_overwrite = false);

// out = a + b
template <typename F>
void ResidualForward(F* out, const F* a, const F* b, int64_t n);
template <typename F>
void ResidualBackward(F* da, F* db, const F* dout, int64_t n);

// Softmax cross-entropy over V classes: probs (N,V), losses (N); returns the mean loss.
template <typename F>
double CrossEntropyForward(F* probs, F* losses, const F* logits, const int32_t* targets, int N,
                           int V);
// dlogits += (probs - onehot(target)) * scale   (scale = 1/N for the mean loss)
template <typename F>
void CrossEntropyBackward(F* dlogits, const F* probs, const int32_t* targets, int N, int V,
                          F scale);

}  // namespace diloco::model
