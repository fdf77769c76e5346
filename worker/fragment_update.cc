#include "worker/fragment_update.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/checksum.h"
#include "kernels/codec.h"
#include "schema/payload_check.h"
#include "schema/transport.h"

namespace diloco::worker {

namespace {

kernels::Codec CodecOf(const wire::Header& h) {
  return {static_cast<kernels::CodecKind>(h.codec()), h.block(), h.topk()};
}

}  // namespace

bool IsUpdateChain(const wire::Header& h) {
  return h.codec() != static_cast<uint8_t>(wire::kFragmentCodec.kind);
}

absl::Status CheckFragmentUpdate(const wire::Message& m, uint64_t numel) {
  const wire::Header& h = m.header();
  if (!IsUpdateChain(h)) {
    if (h.block() != wire::kFragmentCodec.block)
      return absl::InvalidArgumentError(absl::StrCat("fp32 fragment in blocks of ", h.block()));
    return wire::CheckEncodedPayload(m, wire::kFragmentCodec, numel);
  }
  const kernels::Codec codec = CodecOf(h);
  if (auto s = kernels::ValidateCodec(codec); !s.ok()) return s;
  if (h.base_version() == 0 || h.version() <= h.base_version())
    return absl::InvalidArgumentError(
        absl::StrCat("updates from version ", h.base_version(), " to ", h.version()));
  return wire::CheckEncodedPayload(m, codec, numel, h.version() - h.base_version());
}

absl::StatusOr<uint64_t> ReadFragmentUpdate(
    const wire::Message& m, uint64_t from, std::vector<float>& scratch,
    absl::FunctionRef<void(uint64_t pos, std::span<float> out)> gather,
    absl::FunctionRef<void(uint64_t pos, std::span<const float> values)> consume) {
  const wire::Header& h = m.header();
  const uint64_t numel = h.num_elements();
  if (!IsUpdateChain(h)) {
    uint64_t pos = 0;
    for (size_t c = 0; c < m.num_payloads(); ++c) {
      auto p = m.payload(c);
      const std::span<const float> values(reinterpret_cast<const float*>(p.data()), p.size() / 4);
      consume(pos, values);
      pos += values.size();
    }
    return uint64_t{0};
  }
  if (from < h.base_version() || from >= h.version())
    return absl::FailedPreconditionError(absl::StrCat(
        "holding version ", from, ", updates go from ", h.base_version(), " to ", h.version()));
  const kernels::Codec codec = CodecOf(h);
  const wire::PayloadLayout layout(codec, numel);  // chunk_elements checked by CheckFragmentUpdate
  const uint64_t first = from - h.base_version();  // updates already held
  const uint64_t count = h.version() - h.base_version();
  scratch.resize(std::min(layout.chunk_elements(), numel));
  Hasher values;
  for (const wire::PayloadChunk& c : layout) {
    const std::span<float> out(scratch.data(), c.count);
    gather(c.offset, out);
    for (uint64_t u = first; u < count; ++u)
      if (auto s =
              kernels::DecodeAccumulate(codec, m.payload(u * layout.chunks() + c.index), 1.0f, out);
          !s.ok())
        return s;
    values.Update(out.data(), out.size_bytes());
    consume(c.offset, out);
  }
  return values.Digest();
}

}  // namespace diloco::worker
