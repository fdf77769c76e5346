#include "kernels/codec_format.h"

#include <algorithm>
#include <charconv>
#include <cmath>
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
                                   {CodecKind::kInt4, "int4"},
                                   {CodecKind::kTopK, "topk"},
                                   {CodecKind::kTopKPacked, "topk-packed"}};

// Top-k's default block: the largest, so the scales cost least and the choice is the most global.
constexpr uint32_t kTopKDefaultBlock = kMaxBlock;

// Parses all of [first, last) as a T; false on anything else.
template <typename T>
bool ParseAll(const char* first, const char* last, T* v) {
  const auto [ptr, ec] = std::from_chars(first, last, *v);
  return ec == std::errc() && ptr == last && first != last;
}

// "<name>:<fraction>[:<block>]" (k = ceil(fraction * block), at least 1) or the exact form
// CodecName prints, "<name>:<k>/<block>", for a top-k kind named `name` (topk, topk-packed).
absl::StatusOr<Codec> ParseTopK(CodecKind kind, const std::string& name, const std::string& s) {
  const std::string args = s.size() > name.size() + 1 ? s.substr(name.size() + 1) : "";
  const std::string usage = absl::StrCat("codec '", s, "': want ", name,
                                         ":<fraction>[:<block>] (fraction in (0, 1], e.g. ", name,
                                         ":0.02) or ", name, ":<k>/<block>");
  Codec c{kind, kTopKDefaultBlock, 0};
  const char* p = args.data();
  const char* end = p + args.size();
  if (const size_t slash = args.find('/'); slash != std::string::npos) {
    if (!ParseAll(p, p + slash, &c.k) || !ParseAll(p + slash + 1, end, &c.block))
      return absl::InvalidArgumentError(usage);
  } else {
    const size_t colon = args.find(':');
    const char* f_end = colon == std::string::npos ? end : p + colon;
    double fraction = 0;
    if (!ParseAll(p, f_end, &fraction) || !(fraction > 0 && fraction <= 1))
      return absl::InvalidArgumentError(usage);
    if (colon != std::string::npos && !ParseAll(f_end + 1, end, &c.block))
      return absl::InvalidArgumentError(usage);
    if (absl::Status st = ValidateCodec(Codec{CodecKind::kInt8, c.block}); !st.ok()) return st;
    c.k = static_cast<uint32_t>(
        std::clamp(std::ceil(fraction * c.block), 1.0, static_cast<double>(c.block)));
  }
  if (absl::Status st = ValidateCodec(c); !st.ok()) return st;
  return c;
}

}  // namespace

absl::Status ValidateCodec(Codec c) {
  bool known = false;
  for (const KindName& k : kKindNames) known |= k.kind == c.kind;
  if (!known) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown codec kind ", static_cast<int>(c.kind)));
  }
  if (IsTopK(c.kind) && (c.k < 1 || c.k > c.block)) {
    return absl::InvalidArgumentError(absl::StrCat("topk keeps k entries per block of ", c.block,
                                                   ": k must be in [1, ", c.block, "], got ", c.k));
  }
  if (!IsTopK(c.kind) && c.k != 0) {
    return absl::InvalidArgumentError(absl::StrCat("codec kind ", static_cast<int>(c.kind),
                                                   " takes no k (got ", c.k,
                                                   "): k is for topk only"));
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
  if (kind == "topk") return ParseTopK(CodecKind::kTopK, kind, s);
  if (kind == "topk-packed") return ParseTopK(CodecKind::kTopKPacked, kind, s);
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
        absl::StrCat("unknown codec '", s,
                     "' (want fp32, bf16, fp8, int8 or int4[:block], or topk:<fraction>[:block])"));
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
      if (IsTopK(c.kind)) return absl::StrCat(k.name, ":", c.k, "/", c.block);
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
