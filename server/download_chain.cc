#include "server/download_chain.h"

#include <algorithm>
#include <cstring>

#include "common/checksum.h"
#include "kernels/codec_table.h"
#include "kernels/optim.h"

namespace diloco::server {

DownloadChain::DownloadChain(kernels::Codec codec, uint64_t numel)
    : codec_(codec),
      residual_codec_{
          kernels::EntryOf(codec).sparse ? kernels::CodecKind::kFp32 : kernels::CodecKind::kInt4,
          codec.block},
      numel_(numel),
      update_bytes_(wire::PayloadLayout(codec, numel).bytes()),
      residual_(wire::PayloadLayout(residual_codec_, numel).bytes()) {}

bool DownloadChain::Quantize(uint64_t version, std::span<const float> previous,
                             std::span<float> theta, std::vector<float>& scratch) {
  if (!updates_.empty() && updates_.back().version + 1 != version) updates_.clear();
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
    const std::span<const float> before = previous.subspan(c.offset, n);
    const std::span<uint8_t> u(update->data() + c.byte_offset, c.bytes),
        rq(residual_.data() + rc.byte_offset, rc.bytes);
    kernels::Delta(p, before, step);  // theta_v - P_{v-1}
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
    (void)kernels::DecodeAccumulate(codec_, u, 1.0f, p);  // P_v: what the workers compute
    (void)kernels::Encode(residual_codec_, r, rq);        // finite: ErrorFeedbackEncode checked
    sums->push_back(Checksum64(u.data(), u.size()));
    values.Update(p.data(), n * sizeof(float));
  }
  residual_zero_ = false;
  updates_.push_back({version, std::move(update), std::move(sums), values.Digest()});
  return true;
}

std::vector<const DownloadUpdate*> DownloadChain::Between(uint64_t base, uint64_t version) const {
  if (updates_.empty() || base >= version || base + 1 < updates_.front().version ||
      version > updates_.back().version)
    return {};
  const uint64_t count = version - base;
  if (count * update_bytes_ >= numel_ * sizeof(float)) return {};  // the whole one is smaller
  std::vector<const DownloadUpdate*> chain;
  chain.reserve(count);
  for (uint64_t v = base + 1; v <= version; ++v)
    chain.push_back(&updates_[v - updates_.front().version]);
  return chain;
}

void DownloadChain::Trim(uint64_t oldest_base, size_t max_updates) {
  while (!updates_.empty() &&
         (updates_.front().version <= oldest_base || updates_.size() > max_updates))
    updates_.pop_front();
}

void DownloadChain::Reset() {
  updates_.clear();
  residual_zero_ = true;
}

}  // namespace diloco::server
