// The codec table: one entry per codec with everything the rest of the tree asks of it (its
// name as flags spell it, its wire id, the encoded size of n values, the CPU kernels, the checks
// a payload must pass, and its properties). Parsing, printing, sizes, the fast and reference
// entry points (codec.h, reference.h) and the wire's payload check all read this table instead of
// switching on CodecKind, so adding a codec is its kernel file plus one entry in codec_table.cc
// (docs/kernels.md "Adding a codec").
//
// CodecKind (codec_kind.h) stays the wire id, and the constexpr EncodedBytes / HasScales / IsTopK
// there stay for CUDA code, which is compiled without this table; codec_table_test checks that
// they agree with it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>

#include "absl/status/status.h"
#include "kernels/codec_kind.h"

namespace diloco::kernels {

// How a name's arguments are spelled.
enum class CodecArgs : uint8_t {
  kBlock,  // "<name>[:<block>]"
  kKeep,   // "<name>:<fraction>[:<block>]" or "<name>:<k>/<block>" (k entries kept per block)
};

struct CodecEntry {
  CodecKind kind;  // the wire id (Header.codec); never reused
  const char* name;
  CodecArgs args;
  uint32_t default_block;
  // One fp32 scale per block before the values; CodecName prints the block.
  bool has_scales;
  // Only k entries of each block travel (Codec::k in [1, block]; 0 for every other codec).
  bool sparse;
  // decode(encode(x)) == x for every finite x: no error-feedback residual, no download chain.
  bool exact;
  // kernels/cuda.h encodes and decodes it.
  bool cuda;
  // Largest |x - deQ(Q(x))| of one value, as a fraction of its block's largest |x| (top-k: the
  // entries that do not travel decode to 0).
  float max_error;

  size_t (*bytes)(Codec c, size_t n);
  // The wire's check of an encoded chunk of n values (in.size() == bytes(c, n)): what a shard
  // refuses before queueing a push (schema/payload_check.cc).
  absl::Status (*check)(Codec c, std::span<const uint8_t> in, size_t n);
  // What the fast decoder relies on (in.size() == bytes(c, n)), checked before it writes.
  absl::Status (*decode_check)(Codec c, std::span<const uint8_t> in, size_t n);

  // Fast CPU kernels over blocks [b0, b1) of an n-value chunk; `enc` is the whole chunk's
  // encoding, x (and err + delta) finite.
  void (*encode)(Codec c, const float* x, size_t n, size_t b0, size_t b1, uint8_t* enc);
  // out = deQ (acc false) or out += w * deQ (acc true); `enc` passed decode_check.
  void (*decode)(Codec c, const uint8_t* enc, size_t n, size_t b0, size_t b1, float w, bool acc,
                 float* out);
  // Per block: err += delta; enc = Q(err); err -= deQ(enc).
  void (*error_feedback)(Codec c, const float* delta, float* err, size_t n, size_t b0, size_t b1,
                         uint8_t* enc);

  // Scalar reference (kernels/reference.h) of the whole chunk: x finite, out bytes(c, n) long.
  void (*ref_encode)(Codec c, const float* x, size_t n, uint8_t* out);
  // out = deQ (acc false) or out += w * deQ (acc true); `in` passed the reference's check.
  void (*ref_decode)(Codec c, const uint8_t* in, size_t n, float w, bool acc, float* out);
};

// Every codec, in the order ParseCodec's error lists them.
std::span<const CodecEntry> AllCodecs();
// The entry of a wire id, or nullptr when none has it.
const CodecEntry* FindCodec(CodecKind kind);
const CodecEntry* FindCodec(uint8_t wire_id);
// The entry named `name` (the part of a codec's name before ':'), or nullptr.
const CodecEntry* FindCodecByName(std::string_view name);
// The entry of c.kind, which the caller has validated (ValidateCodec).
const CodecEntry& EntryOf(Codec c);

// The whole check of an encoded chunk of n values: a valid codec, in.size() == EncodedSize(c, n),
// then its entry's check.
absl::Status CheckEncoded(Codec c, std::span<const uint8_t> in, size_t n);

}  // namespace diloco::kernels
