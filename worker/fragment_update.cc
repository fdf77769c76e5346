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

// The updates a chain carries: chain_updates, or one per version when unsaid.
uint64_t Updates(const wire::Header& h) {
  return h.chain_updates() != 0 ? h.chain_updates() : h.version() - h.base_version();
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
  if (h.chain_updates() > h.version() - h.base_version())
    return absl::InvalidArgumentError(absl::StrCat(h.chain_updates(), " updates from version ",
                                                   h.base_version(), " to ", h.version()));
  if (h.keyframe_version() != 0 &&
      (h.keyframe_version() < h.base_version() || h.keyframe_version() > h.version()))
    return absl::InvalidArgumentError(absl::StrCat("keyframe ", h.keyframe_version(),
                                                   " outside versions ", h.base_version(), " to ",
                                                   h.version()));
  return wire::CheckEncodedPayload(m, codec, numel, Updates(h));
}

absl::StatusOr<ChainPlan> PlanChain(const wire::Header& h, uint64_t held, uint64_t keyframe) {
  const uint64_t base = h.base_version(), version = h.version(), n = Updates(h);
  const bool per_version = n == version - base;  // U_{base+1} .. U_version
  ChainPlan plan;
  if (base == held) {
    plan.source = ChainPlan::Source::kHeld;
  } else if (per_version && base < held && held < version) {
    plan.skip = held - base;
  } else if (keyframe != 0 && base == keyframe) {
    plan.source = ChainPlan::Source::kKeyframe;
  } else {
    return absl::FailedPreconditionError(absl::StrCat("holding version ", held, " (keyframe ",
                                                      keyframe, "), updates go from ", base, " to ",
                                                      version));
  }
  const uint64_t key = h.keyframe_version() != 0 ? h.keyframe_version() : version;
  plan.keyframe = key;
  if (key == version) return plan;  // the adopted values are the keyframe
  // The chain passes through the new keyframe: one per version, after (key - base) updates;
  // else it is the base or the last update's base (the updates before the last are keyframes).
  const uint64_t after = per_version ? key - base : key == base ? 0 : n - 1;
  if (after < plan.skip) {
    plan.keyframe = 0;  // held past it: this worker cannot rebuild it (it takes the next whole)
  } else if (!(after == 0 && plan.source == ChainPlan::Source::kKeyframe)) {
    plan.keep_after = static_cast<int64_t>(after);  // else: the keyframe kept already
  }
  return plan;
}

absl::StatusOr<uint64_t> ReadFragmentUpdate(
    const wire::Message& m, const ChainPlan& plan, std::vector<float>& scratch,
    absl::FunctionRef<void(uint64_t pos, std::span<float> out)> gather,
    absl::FunctionRef<void(uint64_t pos, std::span<const float> values)> consume,
    absl::FunctionRef<void(uint64_t pos, std::span<const float> values)> keep) {
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
  const uint64_t count = Updates(h);
  if (plan.skip >= count)
    return absl::FailedPreconditionError(
        absl::StrCat("skipping ", plan.skip, " of a chain of ", count, " updates"));
  const kernels::Codec codec = CodecOf(h);
  const wire::PayloadLayout layout(codec, numel);  // chunk_elements checked by CheckFragmentUpdate
  scratch.resize(std::min(layout.chunk_elements(), numel));
  Hasher values;
  for (const wire::PayloadChunk& c : layout) {
    const std::span<float> out(scratch.data(), c.count);
    gather(c.offset, out);
    for (uint64_t u = plan.skip; u < count; ++u) {
      if (plan.keep_after == static_cast<int64_t>(u)) keep(c.offset, out);
      if (auto s =
              kernels::DecodeAccumulate(codec, m.payload(u * layout.chunks() + c.index), 1.0f, out);
          !s.ok())
        return s;
    }
    values.Update(out.data(), out.size_bytes());
    consume(c.offset, out);
  }
  return values.Digest();
}

}  // namespace diloco::worker
