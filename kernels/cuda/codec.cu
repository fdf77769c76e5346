// CUDA codecs. Block codecs (int8, int4, fp8): a group of G lanes (8, 16 or 32, so that each
// lane owns 8 consecutive values) encodes one block: pass 1 reads the block with 16-byte loads
// and reduces |x| (as bits) with warp shuffles, pass 2 re-reads it (from L1/L2) and writes the
// codes with 4-byte stores. Decoding is elementwise, 8 values per thread. All loops are
// grid-stride. The per-value math is kernels/quant_math.h, shared with the CPU reference.
#include <cuda_runtime.h>

#include "kernels/codec_kind.h"
#include "kernels/cuda.h"
#include "kernels/cuda/launch.h"
#include "kernels/quant_math.h"

namespace diloco::kernels::cuda {
namespace {

using detail::kThreads;

template <CodecKind K>
__device__ __forceinline__ float QMax() {
  return K == CodecKind::kInt8 ? qm::kInt8Max
                               : (K == CodecKind::kInt4 ? qm::kInt4Max : qm::kFp8Max);
}

// Loads the values [i, i + cnt) (cnt <= 8) into v (zeros past cnt); with EF, v = err + delta.
template <bool EF>
__device__ __forceinline__ void Load8(const float* __restrict__ x, const float* __restrict__ err,
                                      size_t i, size_t cnt, float v[8]) {
  if (cnt >= 8) {
    const float4 a = *reinterpret_cast<const float4*>(x + i);
    const float4 b = *reinterpret_cast<const float4*>(x + i + 4);
    v[0] = a.x;
    v[1] = a.y;
    v[2] = a.z;
    v[3] = a.w;
    v[4] = b.x;
    v[5] = b.y;
    v[6] = b.z;
    v[7] = b.w;
    if (EF) {
      const float4 c = *reinterpret_cast<const float4*>(err + i);
      const float4 d = *reinterpret_cast<const float4*>(err + i + 4);
      v[0] = c.x + v[0];
      v[1] = c.y + v[1];
      v[2] = c.z + v[2];
      v[3] = c.w + v[3];
      v[4] = d.x + v[4];
      v[5] = d.y + v[5];
      v[6] = d.z + v[6];
      v[7] = d.w + v[7];
    }
    return;
  }
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    v[k] = 0.0f;
    if (static_cast<size_t>(k) < cnt) v[k] = EF ? err[i + k] + x[i + k] : x[i + k];
  }
}

__device__ __forceinline__ void Store8(float* __restrict__ p, size_t i, size_t cnt,
                                       const float v[8]) {
  if (cnt >= 8) {
    *reinterpret_cast<float4*>(p + i) = make_float4(v[0], v[1], v[2], v[3]);
    *reinterpret_cast<float4*>(p + i + 4) = make_float4(v[4], v[5], v[6], v[7]);
    return;
  }
  for (size_t k = 0; k < cnt; ++k) p[i + k] = v[k];
}

// One value's code (as the payload stores it: int8 byte, int4 nibble, fp8 byte) and its
// dequantized value.
template <CodecKind K>
__device__ __forceinline__ uint32_t QuantOne(float x, float scale, float* deq) {
  const float qmax = QMax<K>();
  if (scale == 0.0f) {
    *deq = 0.0f;
    return 0;
  }
  if (K == CodecKind::kFp8E4M3) {
    const uint8_t code = qm::Fp8E4M3FromFloat(qm::Clamp(x / scale, -qmax, qmax));
    *deq = qm::FloatFromFp8E4M3(code) * scale;
    return code;
  }
  const int32_t q = qm::QuantInt(x, scale, qmax);
  *deq = qm::DequantInt(q, scale);
  return K == CodecKind::kInt4 ? qm::Int4Nibble(q) : static_cast<uint8_t>(q);
}

template <CodecKind K, int G, bool EF>
__global__ void __launch_bounds__(kThreads)
    QuantizeBlocks(const float* __restrict__ x, float* __restrict__ err, size_t n, uint32_t block,
                   size_t nb, uint8_t* __restrict__ out, int* nonfinite) {
  constexpr int kPerWarp = 32 / G;
  const int lane = threadIdx.x & 31;
  const int sub = lane / G;
  const int sl = lane % G;
  const size_t warp = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const size_t warps = static_cast<size_t>(gridDim.x) * blockDim.x / 32;
  float* scales = reinterpret_cast<float*>(out);
  uint8_t* payload = out + nb * sizeof(float);
  for (size_t base = warp * kPerWarp; base < nb; base += warps * kPerWarp) {
    const size_t b = base + sub;
    const bool valid = b < nb;
    const size_t lo = b * block;
    const size_t len = valid ? (n - lo < block ? n - lo : block) : 0;
    uint32_t am = 0;
    for (size_t j = static_cast<size_t>(sl) * 8; j < len; j += G * 8) {
      float v[8];
      Load8<EF>(x, err, lo + j, len - j, v);
#pragma unroll
      for (int k = 0; k < 8; ++k) am = max(am, qm::AbsBits(v[k]));
    }
#pragma unroll
    for (int o = G / 2; o > 0; o >>= 1) am = max(am, __shfl_xor_sync(0xFFFFFFFFu, am, o));
    if (!valid) continue;
    if (am >= qm::kInfBits) {
      if (sl == 0 && nonfinite != nullptr) atomicOr(nonfinite, 1);
      continue;
    }
    const float scale = qm::ScaleFromAbsBits(am, QMax<K>());
    if (sl == 0) scales[b] = scale;
    for (size_t j = static_cast<size_t>(sl) * 8; j < len; j += G * 8) {
      const size_t cnt = len - j < 8 ? len - j : 8;
      float v[8], deq[8];
      Load8<EF>(x, err, lo + j, cnt, v);
      uint32_t code[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) code[k] = QuantOne<K>(v[k], scale, &deq[k]);
      if (K == CodecKind::kInt4) {
        uint8_t* p = payload + (lo + j) / 2;
        if (cnt == 8) {
          uint32_t word = 0;
#pragma unroll
          for (int k = 0; k < 8; ++k) word |= code[k] << (4 * k);
          *reinterpret_cast<uint32_t*>(p) = word;
        } else {
          for (size_t k = 0; k < cnt; k += 2) {
            const uint32_t hi = k + 1 < cnt ? code[k + 1] : 0u;
            p[k / 2] = static_cast<uint8_t>(code[k] | (hi << 4));
          }
        }
      } else {
        uint8_t* p = payload + lo + j;
        if (cnt == 8) {
          reinterpret_cast<uint32_t*>(p)[0] =
              code[0] | (code[1] << 8) | (code[2] << 16) | (code[3] << 24);
          reinterpret_cast<uint32_t*>(p)[1] =
              code[4] | (code[5] << 8) | (code[6] << 16) | (code[7] << 24);
        } else {
          for (size_t k = 0; k < cnt; ++k) p[k] = static_cast<uint8_t>(code[k]);
        }
      }
      if (EF) {
        float e[8];
#pragma unroll
        for (int k = 0; k < 8; ++k) e[k] = v[k] - deq[k];
        Store8(err, lo + j, cnt, e);
      }
    }
  }
}

// fp32 / bf16: elementwise, 8 values per thread. With EF, x is delta and err is updated.
template <CodecKind K, bool EF>
__global__ void __launch_bounds__(kThreads)
    EncodeDense(const float* __restrict__ x, float* __restrict__ err, size_t n,
                uint8_t* __restrict__ out, int* nonfinite) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x * 8;
  bool bad = false;
  for (size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 8; i < n;
       i += stride) {
    const size_t cnt = n - i < 8 ? n - i : 8;
    float v[8];
    Load8<EF>(x, err, i, cnt, v);
    uint32_t am = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) am = max(am, qm::AbsBits(v[k]));
    if (am >= qm::kInfBits) {
      bad = true;
      continue;
    }
    float e[8];
    if (K == CodecKind::kFp32) {
      Store8(reinterpret_cast<float*>(out), i, cnt, v);
#pragma unroll
      for (int k = 0; k < 8; ++k) e[k] = v[k] - v[k];
    } else {
      uint32_t h[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        h[k] = qm::Bf16FromFloat(v[k]);
        e[k] = v[k] - qm::FloatFromBf16(h[k]);
      }
      uint16_t* o = reinterpret_cast<uint16_t*>(out);
      if (cnt == 8) {
        *reinterpret_cast<uint4*>(o + i) = make_uint4(h[0] | (h[1] << 16), h[2] | (h[3] << 16),
                                                      h[4] | (h[5] << 16), h[6] | (h[7] << 16));
      } else {
        for (size_t k = 0; k < cnt; ++k) o[i + k] = static_cast<uint16_t>(h[k]);
      }
    }
    if (EF) Store8(err, i, cnt, e);
  }
  if (bad && nonfinite != nullptr) atomicOr(nonfinite, 1);
}

// The 8 decoded values starting at i (a multiple of 8; cnt of them valid).
template <CodecKind K>
__device__ __forceinline__ void Dequant8(const uint8_t* __restrict__ in, size_t nb, uint32_t block,
                                         size_t i, size_t cnt, float v[8]) {
  if (K == CodecKind::kFp32) {
    Load8<false>(reinterpret_cast<const float*>(in), nullptr, i, cnt, v);
    return;
  }
  if (K == CodecKind::kBf16) {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(in);
    if (cnt == 8) {
      const uint4 w = *reinterpret_cast<const uint4*>(h + i);
      const uint32_t words[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        v[2 * k] = qm::FloatFromBf16(words[k] & 0xFFFFu);
        v[2 * k + 1] = qm::FloatFromBf16(words[k] >> 16);
      }
    } else {
      for (int k = 0; k < 8; ++k)
        v[k] = static_cast<size_t>(k) < cnt ? qm::FloatFromBf16(h[i + k]) : 0.0f;
    }
    return;
  }
  // 32-bit division where it fits (64-bit division is a long software sequence on the GPU).
  const size_t b = i <= 0xFFFFFFFFu ? static_cast<uint32_t>(i) / block : i / block;
  const float scale = __ldg(reinterpret_cast<const float*>(in) + b);
  const uint8_t* payload = in + nb * sizeof(float);
  uint32_t code[8];
  if (K == CodecKind::kInt4) {
    if (cnt == 8) {
      const uint32_t word = *reinterpret_cast<const uint32_t*>(payload + i / 2);
#pragma unroll
      for (int k = 0; k < 8; ++k) code[k] = (word >> (4 * k)) & 0xFu;
    } else {
      for (int k = 0; k < 8; ++k) {
        code[k] =
            static_cast<size_t>(k) < cnt ? (payload[(i + k) / 2] >> (4 * (k % 2))) & 0xFu : 0u;
      }
    }
  } else {
    if (cnt == 8) {
      const uint32_t w0 = reinterpret_cast<const uint32_t*>(payload + i)[0];
      const uint32_t w1 = reinterpret_cast<const uint32_t*>(payload + i)[1];
#pragma unroll
      for (int k = 0; k < 4; ++k) {
        code[k] = (w0 >> (8 * k)) & 0xFFu;
        code[k + 4] = (w1 >> (8 * k)) & 0xFFu;
      }
    } else {
      for (int k = 0; k < 8; ++k) code[k] = static_cast<size_t>(k) < cnt ? payload[i + k] : 0u;
    }
  }
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    if (K == CodecKind::kInt8) {
      v[k] = qm::DequantInt(static_cast<int8_t>(code[k]), scale);
    } else if (K == CodecKind::kInt4) {
      v[k] = qm::DequantInt(qm::Int4FromNibble(code[k]), scale);
    } else {
      v[k] = qm::FloatFromFp8E4M3(code[k]) * scale;
    }
  }
}

template <CodecKind K, bool Acc>
__global__ void __launch_bounds__(kThreads)
    DecodeKernel(const uint8_t* __restrict__ in, size_t n, uint32_t block, size_t nb, float w,
                 float* __restrict__ out) {
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x * 8;
  for (size_t i = (static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 8; i < n;
       i += stride) {
    const size_t cnt = n - i < 8 ? n - i : 8;
    float v[8];
    Dequant8<K>(in, nb, block, i, cnt, v);
    if (Acc) {
      float a[8];
      Load8<false>(out, nullptr, i, cnt, a);
#pragma unroll
      for (int k = 0; k < 8; ++k) v[k] = a[k] + w * v[k];
    }
    Store8(out, i, cnt, v);
  }
}

bool Valid(Codec c) {
  const bool kind_ok = c.kind == CodecKind::kFp32 || c.kind == CodecKind::kBf16 ||
                       c.kind == CodecKind::kFp8E4M3 || c.kind == CodecKind::kInt8 ||
                       c.kind == CodecKind::kInt4;
  return kind_ok && c.block >= kMinBlock && c.block <= kMaxBlock && c.block % kBlockMultiple == 0;
}

size_t NumBlocks(Codec c, size_t n) { return HasScales(c.kind) ? (n + c.block - 1) / c.block : 0; }

template <CodecKind K, bool EF>
void LaunchQuantize(Codec c, const float* x, float* err, size_t n, uint8_t* out, int* nonfinite,
                    cudaStream_t s) {
  const size_t nb = NumBlocks(c, n);
  constexpr size_t kWarpsPerCta = kThreads / 32;
  if (c.block >= 256) {
    detail::LaunchWave(QuantizeBlocks<K, 32, EF>, nb, kWarpsPerCta * 1, s, x, err, n, c.block, nb,
                       out, nonfinite);
  } else if (c.block >= 128) {
    detail::LaunchWave(QuantizeBlocks<K, 16, EF>, nb, kWarpsPerCta * 2, s, x, err, n, c.block, nb,
                       out, nonfinite);
  } else {
    detail::LaunchWave(QuantizeBlocks<K, 8, EF>, nb, kWarpsPerCta * 4, s, x, err, n, c.block, nb,
                       out, nonfinite);
  }
}

template <bool EF>
cudaError_t EncodeImpl(Codec c, const float* x, float* err, size_t n, uint8_t* out, int* nonfinite,
                       cudaStream_t s) {
  if (!Valid(c) || !detail::Aligned16(x) || !detail::Aligned16(out) ||
      (EF && !detail::Aligned16(err))) {
    return cudaErrorInvalidValue;
  }
  if (n == 0) return cudaSuccess;
  switch (c.kind) {
    case CodecKind::kFp32:
      detail::LaunchWave(EncodeDense<CodecKind::kFp32, EF>, (n + 7) / 8, kThreads, s, x, err, n,
                         out, nonfinite);
      break;
    case CodecKind::kBf16:
      detail::LaunchWave(EncodeDense<CodecKind::kBf16, EF>, (n + 7) / 8, kThreads, s, x, err, n,
                         out, nonfinite);
      break;
    case CodecKind::kFp8E4M3:
      LaunchQuantize<CodecKind::kFp8E4M3, EF>(c, x, err, n, out, nonfinite, s);
      break;
    case CodecKind::kInt8:
      LaunchQuantize<CodecKind::kInt8, EF>(c, x, err, n, out, nonfinite, s);
      break;
    case CodecKind::kInt4:
      LaunchQuantize<CodecKind::kInt4, EF>(c, x, err, n, out, nonfinite, s);
      break;
    case CodecKind::kTopKPacked:
    case CodecKind::kTopK:  // CPU only (pushes are encoded on the host); Valid() refused it
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

template <bool Acc>
cudaError_t DecodeImpl(Codec c, const uint8_t* in, size_t n, float w, float* out, cudaStream_t s) {
  if (!Valid(c) || !detail::Aligned16(in) || !detail::Aligned16(out)) return cudaErrorInvalidValue;
  if (n == 0) return cudaSuccess;
  const size_t nb = NumBlocks(c, n), items = (n + 7) / 8;
  switch (c.kind) {
    case CodecKind::kFp32:
      detail::LaunchWave(DecodeKernel<CodecKind::kFp32, Acc>, items, kThreads, s, in, n, c.block,
                         nb, w, out);
      break;
    case CodecKind::kBf16:
      detail::LaunchWave(DecodeKernel<CodecKind::kBf16, Acc>, items, kThreads, s, in, n, c.block,
                         nb, w, out);
      break;
    case CodecKind::kFp8E4M3:
      detail::LaunchWave(DecodeKernel<CodecKind::kFp8E4M3, Acc>, items, kThreads, s, in, n, c.block,
                         nb, w, out);
      break;
    case CodecKind::kInt8:
      detail::LaunchWave(DecodeKernel<CodecKind::kInt8, Acc>, items, kThreads, s, in, n, c.block,
                         nb, w, out);
      break;
    case CodecKind::kInt4:
      detail::LaunchWave(DecodeKernel<CodecKind::kInt4, Acc>, items, kThreads, s, in, n, c.block,
                         nb, w, out);
      break;
    case CodecKind::kTopKPacked:
    case CodecKind::kTopK:  // CPU only; Valid() refused it
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t Encode(Codec c, const float* x, size_t n, uint8_t* out, int* nonfinite,
                   cudaStream_t stream) {
  return EncodeImpl<false>(c, x, nullptr, n, out, nonfinite, stream);
}

cudaError_t Decode(Codec c, const uint8_t* in, size_t n, float* out, cudaStream_t stream) {
  return DecodeImpl<false>(c, in, n, 1.0f, out, stream);
}

cudaError_t DecodeAccumulate(Codec c, const uint8_t* in, size_t n, float weight, float* acc,
                             cudaStream_t stream) {
  return DecodeImpl<true>(c, in, n, weight, acc, stream);
}

cudaError_t ErrorFeedbackEncode(Codec c, const float* delta, float* err, size_t n, uint8_t* out,
                                int* nonfinite, cudaStream_t stream) {
  return EncodeImpl<true>(c, delta, err, n, out, nonfinite, stream);
}

}  // namespace diloco::kernels::cuda
