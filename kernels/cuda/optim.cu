// CUDA optimizer steps: elementwise, 4 values per thread with 16-byte loads, grid-stride. The
// float operations and their order are those of kernels/reference.cc; with --fmad=false and IEEE
// division/sqrt the results are bit-identical to the CPU.
#include <cuda_runtime.h>

#include <cmath>

#include "kernels/cuda.h"
#include "kernels/cuda/launch.h"

namespace diloco::kernels::cuda {
namespace {

using detail::kThreads;

// Runs f(i) on every element, 4 at a time where possible: f takes arrays of 4 and a count.
struct Range {
  size_t first, stride, n;
};

__device__ __forceinline__ Range ThreadRange(size_t n) {
  return Range{(static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4,
               static_cast<size_t>(gridDim.x) * blockDim.x * 4, n};
}

__device__ __forceinline__ void Load4(const float* __restrict__ p, size_t i, size_t cnt,
                                      float v[4]) {
  if (cnt == 4) {
    const float4 a = *reinterpret_cast<const float4*>(p + i);
    v[0] = a.x;
    v[1] = a.y;
    v[2] = a.z;
    v[3] = a.w;
  } else {
    for (int k = 0; k < 4; ++k) v[k] = static_cast<size_t>(k) < cnt ? p[i + k] : 0.0f;
  }
}

__device__ __forceinline__ void Store4(float* __restrict__ p, size_t i, size_t cnt,
                                       const float v[4]) {
  if (cnt == 4) {
    *reinterpret_cast<float4*>(p + i) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
    for (size_t k = 0; k < cnt; ++k) p[i + k] = v[k];
  }
}

__global__ void __launch_bounds__(kThreads)
    NesterovKernel(NesterovParams p, float* __restrict__ theta, float* __restrict__ m,
                   const float* __restrict__ d, size_t n) {
  const Range r = ThreadRange(n);
  for (size_t i = r.first; i < n; i += r.stride) {
    const size_t cnt = n - i < 4 ? n - i : 4;
    float t[4], mm[4], dd[4];
    Load4(theta, i, cnt, t);
    Load4(m, i, cnt, mm);
    Load4(d, i, cnt, dd);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      mm[k] = p.mu * mm[k] + dd[k];
      t[k] = t[k] - p.lr * (dd[k] + p.mu * mm[k]);
    }
    Store4(theta, i, cnt, t);
    Store4(m, i, cnt, mm);
  }
}

__global__ void __launch_bounds__(kThreads)
    AdamWKernel(AdamWParams p, float bc1, float bc2, float* __restrict__ param,
                const float* __restrict__ grad, float* __restrict__ m, float* __restrict__ v,
                size_t n) {
  const Range r = ThreadRange(n);
  const float one_minus_b1 = 1.0f - p.beta1;
  const float one_minus_b2 = 1.0f - p.beta2;
  for (size_t i = r.first; i < n; i += r.stride) {
    const size_t cnt = n - i < 4 ? n - i : 4;
    float pp[4], g[4], mm[4], vv[4];
    Load4(param, i, cnt, pp);
    Load4(grad, i, cnt, g);
    Load4(m, i, cnt, mm);
    Load4(v, i, cnt, vv);
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      mm[k] = p.beta1 * mm[k] + one_minus_b1 * g[k];
      vv[k] = p.beta2 * vv[k] + one_minus_b2 * g[k] * g[k];
      const float mhat = __fdiv_rn(mm[k], bc1);
      const float vhat = __fdiv_rn(vv[k], bc2);
      pp[k] = pp[k] - p.lr * (__fdiv_rn(mhat, __fsqrt_rn(vhat) + p.eps) + p.weight_decay * pp[k]);
    }
    Store4(param, i, cnt, pp);
    Store4(m, i, cnt, mm);
    Store4(v, i, cnt, vv);
  }
}

__global__ void __launch_bounds__(kThreads)
    DeltaKernel(const float* __restrict__ anchor, const float* __restrict__ local,
                float* __restrict__ delta, size_t n) {
  const Range r = ThreadRange(n);
  for (size_t i = r.first; i < n; i += r.stride) {
    const size_t cnt = n - i < 4 ? n - i : 4;
    float a[4], l[4];
    Load4(anchor, i, cnt, a);
    Load4(local, i, cnt, l);
#pragma unroll
    for (int k = 0; k < 4; ++k) a[k] = a[k] - l[k];
    Store4(delta, i, cnt, a);
  }
}

__global__ void __launch_bounds__(kThreads)
    LerpKernel(const float* __restrict__ global, float* __restrict__ local, float alpha, size_t n) {
  const Range r = ThreadRange(n);
  for (size_t i = r.first; i < n; i += r.stride) {
    const size_t cnt = n - i < 4 ? n - i : 4;
    float g[4], l[4];
    Load4(global, i, cnt, g);
    Load4(local, i, cnt, l);
#pragma unroll
    for (int k = 0; k < 4; ++k) l[k] = g[k] + alpha * (l[k] - g[k]);
    Store4(local, i, cnt, l);
  }
}

}  // namespace

cudaError_t NesterovStep(NesterovParams p, float* theta, float* m, const float* d, size_t n,
                         cudaStream_t stream) {
  if (!detail::Aligned16(theta) || !detail::Aligned16(m) || !detail::Aligned16(d)) {
    return cudaErrorInvalidValue;
  }
  if (n == 0) return cudaSuccess;
  detail::LaunchWave(NesterovKernel, (n + 3) / 4, kThreads, stream, p, theta, m, d, n);
  return cudaGetLastError();
}

cudaError_t AdamWStep(AdamWParams p, int64_t step, float* param, const float* grad, float* m,
                      float* v, size_t n, cudaStream_t stream) {
  if (!detail::Aligned16(param) || !detail::Aligned16(grad) || !detail::Aligned16(m) ||
      !detail::Aligned16(v)) {
    return cudaErrorInvalidValue;
  }
  if (n == 0) return cudaSuccess;
  // Exactly the CPU's bias corrections (std::pow in float on the host).
  const float bc1 = 1.0f - std::pow(p.beta1, static_cast<float>(step));
  const float bc2 = 1.0f - std::pow(p.beta2, static_cast<float>(step));
  detail::LaunchWave(AdamWKernel, (n + 3) / 4, kThreads, stream, p, bc1, bc2, param, grad, m, v, n);
  return cudaGetLastError();
}

cudaError_t Delta(const float* anchor, const float* local, float* delta, size_t n,
                  cudaStream_t stream) {
  if (!detail::Aligned16(anchor) || !detail::Aligned16(local) || !detail::Aligned16(delta)) {
    return cudaErrorInvalidValue;
  }
  if (n == 0) return cudaSuccess;
  detail::LaunchWave(DeltaKernel, (n + 3) / 4, kThreads, stream, anchor, local, delta, n);
  return cudaGetLastError();
}

cudaError_t LerpAdopt(const float* global, float* local, float alpha, size_t n,
                      cudaStream_t stream) {
  if (!detail::Aligned16(global) || !detail::Aligned16(local)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  detail::LaunchWave(LerpKernel, (n + 3) / 4, kThreads, stream, global, local, alpha, n);
  return cudaGetLastError();
}

}  // namespace diloco::kernels::cuda
