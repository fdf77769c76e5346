#include "kernels/codec_check.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/codec_format.h"
#include "kernels/quant_math.h"

namespace diloco::kernels::internal {
namespace {

bool Fp32AllFinite(const uint8_t* p, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    float v;
    std::memcpy(&v, p + 4 * i, 4);
    if (!std::isfinite(v)) return false;
  }
  return true;
}

absl::Status NonFinite() { return absl::InvalidArgumentError("holds non-finite values"); }

}  // namespace

absl::Status CheckFp32Values(Codec c, std::span<const uint8_t> in, size_t n) {
  return Fp32AllFinite(in.data(), n) ? absl::OkStatus() : NonFinite();
}

absl::Status CheckBf16Values(Codec c, std::span<const uint8_t> in, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint16_t v;
    std::memcpy(&v, in.data() + 2 * i, 2);
    if ((v & 0x7F80u) == 0x7F80u) return NonFinite();  // exponent all ones: Inf or NaN
  }
  return absl::OkStatus();
}

absl::Status CheckScalesFinite(Codec c, std::span<const uint8_t> in, size_t n) {
  return Fp32AllFinite(in.data(), NumBlocks(c, n)) ? absl::OkStatus() : NonFinite();
}

absl::Status CheckFp8Chunk(Codec c, std::span<const uint8_t> in, size_t n) {
  if (absl::Status st = CheckScalesFinite(c, in, n); !st.ok()) return st;
  const uint8_t* p = in.data() + PayloadOffset(c, n);
  for (size_t i = 0; i < n; ++i)
    if ((p[i] & 0x7Fu) == 0x7Fu) return NonFinite();  // e4m3: S.1111.111 is NaN, no Inf
  return absl::OkStatus();
}

absl::Status CheckScalesNonNegative(Codec c, std::span<const uint8_t> in, size_t n) {
  const size_t nb = NumBlocks(c, n);
  uint32_t m = 0;
  for (size_t b = 0; b < nb; ++b) {
    uint32_t bits;
    std::memcpy(&bits, in.data() + b * sizeof(float), sizeof(bits));
    m = std::max(m, bits);
  }
  if (m >= qm::kInfBits) {
    return absl::InvalidArgumentError("encoded delta has a negative or non-finite block scale");
  }
  return absl::OkStatus();
}

absl::Status CheckNothing(Codec c, std::span<const uint8_t> in, size_t n) {
  return absl::OkStatus();
}

}  // namespace diloco::kernels::internal
