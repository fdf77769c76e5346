// The CUDA path of the kernels (library diloco_kernels_cuda, built only with CUDA): the same
// codecs and optimizer steps as codec.h / optim.h, on device memory.
//
// Conventions:
//   * Every pointer is a device pointer aligned to 16 bytes (cudaMalloc gives 256); misaligned
//     pointers or an invalid codec return cudaErrorInvalidValue without launching anything.
//   * Every function only enqueues work on `stream` and returns the launch status: no hidden
//     synchronisation, no allocation.
//   * Bytes equal the CPU reference (kernels/reference.h): the kernels run the per-value math of
//     kernels/quant_math.h, compiled with --fmad=false and IEEE division and square root.
//   * Non-finite input cannot be refused without a synchronisation, so it is reported instead:
//     when `nonfinite` is not null, any NaN/Inf in a block (for error feedback: in err + delta)
//     sets *nonfinite to 1 (atomicOr; the caller zeroes it first and reads it after its own
//     synchronisation). That block's scale, codes (and err) are left unwritten; the rest of the
//     output is valid. fp32/bf16 report too.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "kernels/codec_kind.h"
#include "kernels/optim_params.h"

namespace diloco::kernels::cuda {

// out has EncodedBytes(c, n) bytes.
cudaError_t Encode(Codec c, const float* x, size_t n, uint8_t* out, int* nonfinite,
                   cudaStream_t stream);
// out = deQ(in).
cudaError_t Decode(Codec c, const uint8_t* in, size_t n, float* out, cudaStream_t stream);
// acc += weight * deQ(in).
cudaError_t DecodeAccumulate(Codec c, const uint8_t* in, size_t n, float weight, float* acc,
                             cudaStream_t stream);
// e = err + delta; out = Q(e); err = e - deQ(out). One pass.
cudaError_t ErrorFeedbackEncode(Codec c, const float* delta, float* err, size_t n, uint8_t* out,
                                int* nonfinite, cudaStream_t stream);

cudaError_t NesterovStep(NesterovParams p, float* theta, float* m, const float* d, size_t n,
                         cudaStream_t stream);
// `step` is 1-based; the bias corrections are computed on the host exactly as on the CPU.
cudaError_t AdamWStep(AdamWParams p, int64_t step, float* param, const float* grad, float* m,
                      float* v, size_t n, cudaStream_t stream);
cudaError_t Delta(const float* anchor, const float* local, float* delta, size_t n,
                  cudaStream_t stream);
cudaError_t LerpAdopt(const float* global, float* local, float alpha, size_t n,
                      cudaStream_t stream);

}  // namespace diloco::kernels::cuda
