// Per-value codec math shared verbatim by the scalar reference, the fast CPU path and the CUDA
// kernels. Sharing the exact float operations (in the same order, with FMA contraction off on
// both sides: -ffp-contract=off, nvcc -fmad=false) is what makes all three produce the same
// bytes. Only IEEE-exact operations are used: +, -, *, / (correctly rounded), integer bit
// manipulation, and round-half-even through the 1.5*2^23 "magic number" addition.
//
// Rules (see docs/kernels.md):
//   absmax  = max |x| over the block (computed on the bit pattern; NaN/Inf sort above finite)
//   int8    scale = absmax / 127; q = clamp(rne(x / scale), -127, 127); deQ = q * scale
//   int4    scale = absmax / 7;   q = clamp(rne(x / scale), -7, 7);     deQ = q * scale
//   fp8     scale = absmax / 448; q = e4m3_rne(clamp(x / scale, -448, 448)); deQ = e4m3(q) * scale
//   scale == 0 (all-zero block): every q is 0 and decodes to 0.
//   bf16    round-to-nearest-even of the top 16 bits; deQ = bits << 16.
#pragma once

#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define DILOCO_HD __host__ __device__ __forceinline__
#else
#define DILOCO_HD __attribute__((always_inline)) inline
#endif

namespace diloco::kernels::qm {

inline constexpr float kInt8Max = 127.0f;
inline constexpr float kInt4Max = 7.0f;
inline constexpr float kFp8Max = 448.0f;
// Bit pattern of +Inf: an |x| bit pattern at or above it is Inf or NaN.
inline constexpr uint32_t kInfBits = 0x7F800000u;

DILOCO_HD uint32_t FloatBits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

DILOCO_HD float BitsFloat(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

// |x| as an integer: monotone in |x| for finite values, and >= kInfBits for Inf/NaN.
DILOCO_HD uint32_t AbsBits(float x) { return FloatBits(x) & 0x7FFFFFFFu; }

// Round half to even for |v| < 2^22 (all callers stay far below).
DILOCO_HD float Rne(float v) {
  const float kMagic = 12582912.0f;  // 1.5 * 2^23
  const float t = v + kMagic;
  return t - kMagic;
}

DILOCO_HD float Clamp(float v, float lo, float hi) { return v < lo ? lo : (v > hi ? hi : v); }

// The block scale from the block's absmax (as bits) and the codec's largest code value.
DILOCO_HD float ScaleFromAbsBits(uint32_t abs_bits, float qmax) {
  return BitsFloat(abs_bits) / qmax;
}

// Integer quantization (int8: qmax=127, int4: qmax=7). scale must be > 0.
DILOCO_HD int32_t QuantInt(float x, float scale, float qmax) {
  return static_cast<int32_t>(Clamp(Rne(x / scale), -qmax, qmax));
}

DILOCO_HD float DequantInt(int32_t q, float scale) { return static_cast<float>(q) * scale; }

// int4 nibble <-> value (two's complement in 4 bits).
DILOCO_HD uint8_t Int4Nibble(int32_t q) { return static_cast<uint8_t>(q) & 0x0Fu; }
DILOCO_HD int32_t Int4FromNibble(uint32_t nib) {
  return static_cast<int32_t>(nib & 0x0Fu) - static_cast<int32_t>((nib & 0x08u) << 1);
}

// fp32 -> OCP fp8 E4M3 (bias 7, no Inf, max 448) with round-to-nearest-even, for finite
// |v| <= 448 (callers clamp). Branch-free so that it vectorises.
DILOCO_HD uint8_t Fp8E4M3FromFloat(float v) {
  const uint32_t bits = FloatBits(v);
  const uint32_t sign = (bits >> 24) & 0x80u;
  const uint32_t a = bits & 0x7FFFFFFFu;
  // Normal range (|v| >= 2^-6): round the 23-bit mantissa to 3 bits, half to even; a carry
  // moves into the exponent, which is what we want. Rebias 127 -> 7.
  const uint32_t rounded = (a + 0x7FFFFu + ((a >> 20) & 1u)) >> 20;
  const uint32_t normal = rounded - (120u << 3);
  // Subnormal range (|v| < 2^-6): code = rne(|v| * 2^9), 0..8 (8 is the smallest normal).
  const float sub = Rne(BitsFloat(a) * 512.0f);
  const uint32_t subnormal = static_cast<uint32_t>(static_cast<int32_t>(sub));
  const uint32_t code = a < 0x3C800000u ? subnormal : normal;  // 0x3C800000 = 2^-6
  return static_cast<uint8_t>(sign | code);
}

// OCP fp8 E4M3 -> fp32, exact. Codes 0x7F/0xFF (NaN in E4M3) decode to NaN.
DILOCO_HD float FloatFromFp8E4M3(uint32_t code) {
  const uint32_t sign = (code & 0x80u) << 24;
  const uint32_t e = (code >> 3) & 0x0Fu;
  const uint32_t m = code & 0x07u;
  const float sub = static_cast<float>(static_cast<int32_t>(m)) * (1.0f / 512.0f);
  const uint32_t normal_bits = ((e + 120u) << 23) | (m << 20);
  const uint32_t nan_bits = 0x7FC00000u;
  const uint32_t mag_bits =
      e == 0 ? FloatBits(sub) : ((code & 0x7Fu) == 0x7Fu ? nan_bits : normal_bits);
  return BitsFloat(sign | mag_bits);
}

DILOCO_HD uint16_t Bf16FromFloat(float x) {
  const uint32_t u = FloatBits(x);
  return static_cast<uint16_t>((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

DILOCO_HD float FloatFromBf16(uint32_t h) { return BitsFloat(h << 16); }

}  // namespace diloco::kernels::qm
