#include "schema/payload_check.h"

#include "absl/strings/str_cat.h"
#include "kernels/codec.h"
#include "kernels/codec_table.h"
#include "schema/payload_layout.h"
#include "schema/transport.h"

namespace diloco::wire {
absl::Status CheckEncodedPayload(const Message& m, kernels::Codec codec, uint64_t numel,
                                 uint64_t count) {
  const auto& h = m.header();
  const kernels::CodecEntry* entry = kernels::FindCodec(codec.kind);
  if (entry == nullptr)
    return WireError(ErrorCode::BadCodec,
                     absl::StrCat("unknown codec kind ", static_cast<int>(codec.kind)));
  if (h.num_elements() != numel)
    return WireError(ErrorCode::BadLength, absl::StrCat("payload of ", h.num_elements(),
                                                        " elements for a fragment of ", numel));
  const PayloadLayout layout(codec, numel);
  if (h.chunk_elements() != layout.chunk_elements())
    return WireError(ErrorCode::BadLength,
                     absl::StrCat("chunk of ", h.chunk_elements(), " elements, expected ",
                                  layout.chunk_elements()));
  const uint64_t frames = layout.chunks() * count;
  if (m.num_payloads() != frames)
    return WireError(ErrorCode::BadLength,
                     absl::StrCat(m.num_payloads(), " payload frames, expected ", frames));
  for (uint64_t i = 0; i < frames; ++i) {
    const PayloadChunk c = layout.chunk(i % layout.chunks());
    const uint64_t n = c.count;
    auto p = m.payload(i);
    if (p.size() != c.bytes)
      return WireError(ErrorCode::BadLength,
                       absl::StrCat("frame ", i, " has ", p.size(), " bytes, codec ",
                                    kernels::CodecName(codec), " needs ", c.bytes));
    if (absl::Status st = entry->check(codec, p, n); !st.ok())
      return WireError(ErrorCode::BadCodec, absl::StrCat("frame ", i, ": ", st.message()));
  }
  return absl::OkStatus();
}

}  // namespace diloco::wire
