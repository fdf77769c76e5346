// The codec descriptor (kind + block size), split out of codec.h so that CUDA translation units
// (compiled as C++17, without <span> or Abseil) can name it too. Include codec.h in C++ code.
#pragma once

#include <cstddef>
#include <cstdint>

namespace diloco::kernels {

enum class CodecKind : uint8_t { kFp32 = 0, kBf16 = 1, kFp8E4M3 = 2, kInt8 = 3, kInt4 = 4 };

struct Codec {
  CodecKind kind = CodecKind::kInt8;
  uint32_t block = 256;
};

// Block sizes accepted by ValidateCodec: multiples of 8 in [64, 2048]. Multiples of 8 keep every
// block byte-aligned in the int4 payload and 32-byte aligned in fp32, so blocks can be encoded
// independently (in parallel, and by one CUDA warp each) with vector loads.
inline constexpr uint32_t kMinBlock = 64;
inline constexpr uint32_t kMaxBlock = 2048;
inline constexpr uint32_t kBlockMultiple = 8;

constexpr bool HasScales(CodecKind k) {
  return k == CodecKind::kFp8E4M3 || k == CodecKind::kInt8 || k == CodecKind::kInt4;
}

// Bytes of the encoded form of n values (= EncodedSize in codec.h; usable from CUDA code).
constexpr size_t EncodedBytes(Codec c, size_t n) {
  const size_t scales = HasScales(c.kind) ? (n + c.block - 1) / c.block * sizeof(float) : 0;
  switch (c.kind) {
    case CodecKind::kFp32:
      return n * 4;
    case CodecKind::kBf16:
      return n * 2;
    case CodecKind::kFp8E4M3:
    case CodecKind::kInt8:
      return scales + n;
    case CodecKind::kInt4:
      return scales + (n + 1) / 2;
  }
  return 0;
}

}  // namespace diloco::kernels
