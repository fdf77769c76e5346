#include "kernels/codec_format.h"

#include <charconv>
#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/codec.h"

namespace diloco::kernels {
namespace {

struct KindName {
  CodecKind kind;
  const char* name;
};
constexpr KindName kKindNames[] = {{CodecKind::kFp32, "fp32"},
                                   {CodecKind::kBf16, "bf16"},
                                   {CodecKind::kFp8E4M3, "fp8"},
                                   {CodecKind::kInt8, "int8"},
                                   {CodecKind::kInt4, "int4"}};

}  // namespace

absl::Status ValidateCodec(Codec c) {
  bool known = false;
  for (const KindName& k : kKindNames) known |= k.kind == c.kind;
  if (!known) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown codec kind ", static_cast<int>(c.kind)));
  }
  if (c.block < kMinBlock || c.block > kMaxBlock || c.block % kBlockMultiple != 0) {
    return absl::InvalidArgumentError(absl::StrCat("codec block ", c.block,
                                                   " must be a multiple of ", kBlockMultiple,
                                                   " in [", kMinBlock, ", ", kMaxBlock, "]"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Codec> ParseCodec(const std::string& s) {
  const size_t colon = s.find(':');
  const std::string kind = s.substr(0, colon);
  Codec c;
  bool found = false;
  for (const KindName& k : kKindNames) {
    if (kind == k.name) {
      c.kind = k.kind;
      found = true;
    }
  }
  if (!found) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown codec '", s, "' (want fp32, bf16, fp8, int8 or int4[:block])"));
  }
  if (colon != std::string::npos) {
    const char* first = s.data() + colon + 1;
    const char* last = s.data() + s.size();
    uint32_t block = 0;
    const auto [ptr, ec] = std::from_chars(first, last, block);
    if (ec != std::errc() || ptr != last || first == last) {
      return absl::InvalidArgumentError(absl::StrCat("bad block size in codec '", s, "'"));
    }
    c.block = block;
  }
  if (absl::Status st = ValidateCodec(c); !st.ok()) return st;
  return c;
}

std::string CodecName(Codec c) {
  for (const KindName& k : kKindNames) {
    if (k.kind == c.kind) {
      return HasScales(c.kind) ? absl::StrCat(k.name, ":", c.block) : std::string(k.name);
    }
  }
  return absl::StrCat("unknown(", static_cast<int>(c.kind), ")");
}

size_t EncodedSize(Codec c, size_t n) { return EncodedBytes(c, n); }

namespace internal {

absl::Status CheckSizes(Codec c, size_t n, size_t encoded_bytes) {
  if (absl::Status st = ValidateCodec(c); !st.ok()) return st;
  const size_t want = EncodedSize(c, n);
  if (encoded_bytes != want) {
    return absl::InvalidArgumentError(absl::StrCat(CodecName(c), " of ", n, " values is ", want,
                                                   " bytes, got a buffer of ", encoded_bytes));
  }
  return absl::OkStatus();
}

absl::Status NonFiniteError(const char* what) {
  return absl::InvalidArgumentError(absl::StrCat(what, " contains NaN or Inf; nothing written"));
}

}  // namespace internal
}  // namespace diloco::kernels
