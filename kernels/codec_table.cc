#include "kernels/codec_table.h"

#include "kernels/codec_check.h"
#include "kernels/codec_format.h"
#include "kernels/fast_ops.h"
#include "kernels/reference_dense.h"
#include "kernels/reference_topk.h"
#include "kernels/topk.h"

namespace diloco::kernels {
namespace {

size_t Scales(Codec c, size_t n) { return (n + c.block - 1) / c.block * sizeof(float); }

// A dense codec: the fast kernels of fast_impl.inc (through fast_ops.h), the reference of
// reference_dense.cc.
constexpr CodecEntry Dense(CodecKind kind, const char* name, bool has_scales, bool exact,
                           float max_error, size_t (*bytes)(Codec, size_t),
                           absl::Status (*check)(Codec, std::span<const uint8_t>, size_t),
                           absl::Status (*decode_check)(Codec, std::span<const uint8_t>, size_t)) {
  return CodecEntry{.kind = kind,
                    .name = name,
                    .args = CodecArgs::kBlock,
                    .default_block = 256,
                    .has_scales = has_scales,
                    .sparse = false,
                    .exact = exact,
                    .cuda = true,
                    .max_error = max_error,
                    .bytes = bytes,
                    .check = check,
                    .decode_check = decode_check,
                    .encode = internal::DenseEncodeBlocks,
                    .decode = internal::DenseDecodeBlocks,
                    .error_feedback = internal::DenseErrorFeedbackBlocks,
                    .ref_encode = ref::DenseEncode,
                    .ref_decode = ref::DenseDecode};
}

// A top-k codec (topk.h; the reference in reference_topk.cc). Its block defaults to the largest,
// so the magnitudes cost least and the choice is the most global.
constexpr CodecEntry TopK(CodecKind kind, const char* name) {
  return CodecEntry{.kind = kind,
                    .name = name,
                    .args = CodecArgs::kKeep,
                    .default_block = kMaxBlock,
                    .has_scales = false,
                    .sparse = true,
                    .exact = false,
                    .cuda = false,
                    .max_error = 1.0f,
                    .bytes = TopKBytes,
                    .check = internal::CheckTopK,
                    .decode_check = internal::CheckTopK,
                    .encode = internal::TopKEncodeBlocks,
                    .decode = internal::TopKDecodeBlocks,
                    .error_feedback = internal::TopKErrorFeedbackBlocks,
                    .ref_encode = ref::TopKEncode,
                    .ref_decode = ref::TopKDecode};
}

constexpr CodecEntry kCodecs[] = {
    Dense(
        CodecKind::kFp32, "fp32", false, true, 0.0f, [](Codec c, size_t n) { return n * 4; },
        internal::CheckFp32Values, internal::CheckNothing),
    // Half an ulp of bf16's 8-bit significand.
    Dense(
        CodecKind::kBf16, "bf16", false, false, 0x1p-8f, [](Codec c, size_t n) { return n * 2; },
        internal::CheckBf16Values, internal::CheckNothing),
    // Half an ulp of E4M3's 4-bit significand (subnormals: half of scale * 2^-9, far below).
    Dense(
        CodecKind::kFp8E4M3, "fp8", true, false, 0x1p-4f,
        [](Codec c, size_t n) { return Scales(c, n) + n; }, internal::CheckFp8Chunk,
        internal::CheckScalesNonNegative),
    // Half a step of absmax / 127 (and / 7).
    Dense(
        CodecKind::kInt8, "int8", true, false, 0.5f / 127,
        [](Codec c, size_t n) { return Scales(c, n) + n; }, internal::CheckScalesFinite,
        internal::CheckScalesNonNegative),
    Dense(
        CodecKind::kInt4, "int4", true, false, 0.5f / 7,
        [](Codec c, size_t n) { return Scales(c, n) + (n + 1) / 2; }, internal::CheckScalesFinite,
        internal::CheckScalesNonNegative),
    TopK(CodecKind::kTopK, "topk"),
    // The first index forms (2026-12-03), still read so that workers of either kind push to one
    // shard.
    TopK(CodecKind::kTopKPacked, "topk-packed"),
};

}  // namespace

std::span<const CodecEntry> AllCodecs() { return kCodecs; }

const CodecEntry* FindCodec(CodecKind kind) {
  for (const CodecEntry& e : kCodecs)
    if (e.kind == kind) return &e;
  return nullptr;
}

const CodecEntry* FindCodec(uint8_t wire_id) { return FindCodec(static_cast<CodecKind>(wire_id)); }

const CodecEntry* FindCodecByName(std::string_view name) {
  for (const CodecEntry& e : kCodecs)
    if (name == e.name) return &e;
  return nullptr;
}

const CodecEntry& EntryOf(Codec c) { return *FindCodec(c.kind); }

absl::Status CheckEncoded(Codec c, std::span<const uint8_t> in, size_t n) {
  if (absl::Status st = internal::CheckSizes(c, n, in.size()); !st.ok()) return st;
  return EntryOf(c).check(c, in, n);
}

}  // namespace diloco::kernels
