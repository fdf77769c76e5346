#include "server/download_chain.h"

#include <algorithm>
#include <cstring>

#include "common/checksum.h"
#include "kernels/codec_table.h"
#include "kernels/optim.h"

namespace diloco::server {

DownloadChain::DownloadChain(kernels::Codec codec, uint64_t numel, uint32_t every)
    : codec_(codec),
      residual_codec_{
          kernels::EntryOf(codec).sparse ? kernels::CodecKind::kFp32 : kernels::CodecKind::kInt4,
          codec.block},
      numel_(numel),
      update_bytes_(wire::PayloadLayout(codec, numel).bytes()),
      residual_(wire::PayloadLayout(residual_codec_, numel).bytes()),
      every_(std::max<uint32_t>(every, 1)) {}

bool DownloadChain::Quantize(uint64_t version, std::span<const float> previous,
                             std::span<float> theta, std::vector<float>& scratch, bool caught_up) {
  if (!updates_.empty() && updates_.back().version + 1 != version) updates_.clear();
  const bool keyed = every_ > 1;
  if (keyed && keyframe_ == 0) keyframe_ = version - 1;  // the first since a Reset: P_{v-1}
  // Built on the version before (no keyframes, or it is the keyframe: its values are
  // `previous`) or on the keyframe's values kept apart.
  const uint64_t base = keyed ? keyframe_ : version - 1;
  const std::span<const float> base_values =
      base == version - 1 ? previous : std::span<const float>(keyframe_values_);
  auto update = std::make_shared<wire::Bytes>(update_bytes_);
  auto sums = std::make_shared<std::vector<uint64_t>>();
  Hasher values;
  const wire::PayloadLayout layout(codec_, numel_), residual_layout(residual_codec_, numel_);
  const size_t chunk = std::min<uint64_t>(layout.chunk_elements(), numel_);
  if (scratch.size() < 2 * chunk) scratch.resize(2 * chunk);
  for (const wire::PayloadChunk& c : layout) {  // the residual's chunks are the same values'
    const wire::PayloadChunk rc = residual_layout.chunk(c.index);
    const size_t n = c.count;
    const std::span<float> step(scratch.data(), n), r(scratch.data() + chunk, n);
    const std::span<float> p = theta.subspan(c.offset, n);
    const std::span<const float> before = base_values.subspan(c.offset, n);
    const std::span<uint8_t> u(update->data() + c.byte_offset, c.bytes),
        rq(residual_.data() + rc.byte_offset, rc.bytes);
    kernels::Delta(p, before, step);  // theta_v - P_base
    if (residual_zero_) {
      std::fill(r.begin(), r.end(), 0.0f);
    } else if (!kernels::Decode(residual_codec_, rq, r).ok()) {
      Reset();  // unreachable: the residual was encoded here from finite values
      return false;
    }
    // U = Q(step + r); r = step + r - deQ(U): refused (nothing written) when not finite.
    if (!kernels::ErrorFeedbackEncode(codec_, step, r, u).ok()) {
      Reset();
      return false;
    }
    std::memcpy(p.data(), before.data(), n * sizeof(float));
    (void)kernels::DecodeAccumulate(codec_, u, 1.0f, p);  // P_v = P_base + deQ(U_v), as workers do
    (void)kernels::Encode(residual_codec_, r, rq);        // finite: ErrorFeedbackEncode checked
    sums->push_back(Checksum64(u.data(), u.size()));
    values.Update(p.data(), n * sizeof(float));
  }
  residual_zero_ = false;
  const bool keyframe = !keyed || caught_up || version - keyframe_ >= every_;
  if (keyed && keyframe) {
    keyframe_ = version;  // its values are the next version's `previous`
  } else if (keyed && base == version - 1) {
    // Later versions build on the keyframe too: its values are kept apart from now on (the
    // only copy, and the only memory keyframes take, while workers lag).
    keyframe_values_.assign(previous.begin(), previous.end());
  }
  updates_.push_back(
      {version, base, keyframe, std::move(update), std::move(sums), values.Digest()});
  return true;
}

const DownloadUpdate* DownloadChain::Find(uint64_t version) const {
  auto it = std::lower_bound(updates_.begin(), updates_.end(), version,
                             [](const DownloadUpdate& u, uint64_t v) { return u.version < v; });
  return it != updates_.end() && it->version == version ? &*it : nullptr;
}

std::vector<const DownloadUpdate*> DownloadChain::Between(uint64_t base, uint64_t version) const {
  if (base >= version) return {};
  // From version's update back through the ones it was built on, to base.
  std::vector<const DownloadUpdate*> chain;
  for (const DownloadUpdate* u = Find(version);; u = Find(u->base)) {
    if (!u) return {};  // not held (trimmed, or before a Reset)
    chain.push_back(u);
    if (chain.size() * update_bytes_ >= numel_ * sizeof(float)) return {};  // whole is smaller
    if (u->base == base) break;
    if (u->base < base) return {};  // base is not a version the updates build on
  }
  std::reverse(chain.begin(), chain.end());
  return chain;
}

void DownloadChain::MarkKeyframe(uint64_t version, std::span<const float> values, bool newest) {
  if (every_ == 1 || version <= keyframe_) return;
  keyframe_ = version;
  // The newest version's values are the next Quantize's `previous`: no copy needed.
  if (!newest) keyframe_values_.assign(values.begin(), values.end());
  auto it = std::lower_bound(updates_.begin(), updates_.end(), version,
                             [](const DownloadUpdate& u, uint64_t v) { return u.version < v; });
  if (it != updates_.end() && it->version == version) it->keyframe = true;
}

void DownloadChain::Trim(uint64_t oldest_base, uint64_t published, size_t max_updates) {
  std::erase_if(updates_,
                [&](const DownloadUpdate& u) { return !u.keyframe && u.version < published; });
  while (!updates_.empty() &&
         (updates_.front().version <= oldest_base || updates_.size() > max_updates))
    updates_.pop_front();
}

void DownloadChain::Reset() {
  updates_.clear();
  residual_zero_ = true;
  keyframe_ = 0;
  keyframe_values_.clear();
  keyframe_values_.shrink_to_fit();
}

}  // namespace diloco::server
