#include "kernels/codec_format.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>
#include <string_view>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/codec.h"
#include "kernels/codec_table.h"

namespace diloco::kernels {
namespace {

// Parses all of [first, last) as a T; false on anything else.
template <typename T>
bool ParseAll(const char* first, const char* last, T* v) {
  const auto [ptr, ec] = std::from_chars(first, last, *v);
  return ec == std::errc() && ptr == last && first != last;
}

// "<name>:<fraction>[:<block>]" (k = ceil(fraction * block), at least 1) or the exact form
// CodecName prints, "<name>:<k>/<block>", for a codec that keeps k entries per block.
absl::StatusOr<Codec> ParseKeep(const CodecEntry& e, const std::string& s) {
  const std::string name = e.name;
  const std::string args = s.size() > name.size() + 1 ? s.substr(name.size() + 1) : "";
  const std::string usage = absl::StrCat("codec '", s, "': want ", name,
                                         ":<fraction>[:<block>] (fraction in (0, 1], e.g. ", name,
                                         ":0.02) or ", name, ":<k>/<block>");
  Codec c{e.kind, e.default_block, 0};
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

// "<name>[:<block>]".
absl::StatusOr<Codec> ParseBlock(const CodecEntry& e, const std::string& s) {
  Codec c{e.kind, e.default_block, 0};
  if (const size_t colon = s.find(':'); colon != std::string::npos) {
    if (!ParseAll(s.data() + colon + 1, s.data() + s.size(), &c.block))
      return absl::InvalidArgumentError(absl::StrCat("bad block size in codec '", s, "'"));
  }
  if (absl::Status st = ValidateCodec(c); !st.ok()) return st;
  return c;
}

// "fp32, bf16, fp8, int8 or int4[:block], or topk:<fraction>[:block] or topk-packed:...".
std::string KnownNames() {
  std::vector<std::string> block, keep;
  for (const CodecEntry& e : AllCodecs())
    (e.args == CodecArgs::kBlock ? block : keep).push_back(e.name);
  std::string out;
  for (size_t i = 0; i < block.size(); ++i)
    absl::StrAppend(&out, i == 0 ? "" : (i + 1 == block.size() ? " or " : ", "), block[i]);
  absl::StrAppend(&out, "[:block]");
  for (size_t i = 0; i < keep.size(); ++i)
    absl::StrAppend(&out, i == 0 ? ", or " : " or ", keep[i], ":<fraction>[:block]");
  return out;
}

}  // namespace

absl::Status ValidateCodec(Codec c) {
  const CodecEntry* e = FindCodec(c.kind);
  if (e == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown codec kind ", static_cast<int>(c.kind)));
  }
  if (e->sparse && (c.k < 1 || c.k > c.block)) {
    return absl::InvalidArgumentError(absl::StrCat(e->name, " keeps k entries per block of ",
                                                   c.block, ": k must be in [1, ", c.block,
                                                   "], got ", c.k));
  }
  if (!e->sparse && c.k != 0) {
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
  const CodecEntry* e = FindCodecByName(std::string_view(s).substr(0, s.find(':')));
  if (e == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown codec '", s, "' (want ", KnownNames(), ")"));
  }
  return e->args == CodecArgs::kKeep ? ParseKeep(*e, s) : ParseBlock(*e, s);
}

std::string CodecName(Codec c) {
  const CodecEntry* e = FindCodec(c.kind);
  if (e == nullptr) return absl::StrCat("unknown(", static_cast<int>(c.kind), ")");
  if (e->args == CodecArgs::kKeep) return absl::StrCat(e->name, ":", c.k, "/", c.block);
  return e->has_scales ? absl::StrCat(e->name, ":", c.block) : std::string(e->name);
}

size_t EncodedSize(Codec c, size_t n) {
  const CodecEntry* e = FindCodec(c.kind);
  return e == nullptr ? 0 : e->bytes(c, n);
}

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
