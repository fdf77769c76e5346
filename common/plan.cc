#include "common/plan.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/checksum.h"

namespace diloco {
namespace {

// Index of the lightest bin; ties go to the lowest index so the result is deterministic.
size_t Lightest(const std::vector<uint64_t>& load) {
  return static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
}

}  // namespace

absl::StatusOr<Plan> Plan::Create(const Manifest& manifest, uint32_t num_fragments,
                                  uint32_t num_shards) {
  if (num_fragments == 0 || num_shards == 0)
    return absl::InvalidArgumentError("plan: fragments and shards must be positive");
  if (num_shards > num_fragments)
    return absl::InvalidArgumentError(absl::StrCat(
        "plan: ", num_shards, " shards need at least as many fragments, got ", num_fragments));
  const uint64_t total = manifest.total_elements();
  if (total < num_fragments)
    return absl::InvalidArgumentError("plan: more fragments than parameters");
  const uint64_t budget = (total + num_fragments - 1) / num_fragments;

  std::vector<Piece> pieces;
  for (const auto& t : manifest.tensors()) {
    for (uint64_t off = 0; off < t.numel(); off += budget)
      pieces.push_back({t.offset + off, std::min(budget, t.numel() - off)});
  }
  // Largest first; stable on flat offset for determinism.
  std::stable_sort(pieces.begin(), pieces.end(),
                   [](const Piece& a, const Piece& b) { return a.length > b.length; });

  Plan plan;
  plan.num_shards_ = num_shards;
  plan.total_ = total;
  plan.fragments_.resize(num_fragments);
  std::vector<uint64_t> load(num_fragments, 0);
  for (const Piece& p : pieces) {
    size_t f = Lightest(load);
    plan.fragments_[f].pieces.push_back(p);
    load[f] += p.length;
  }
  for (uint32_t i = 0; i < num_fragments; ++i) {
    auto& f = plan.fragments_[i];
    f.id = i;
    f.numel = load[i];
    std::sort(f.pieces.begin(), f.pieces.end(),
              [](const Piece& a, const Piece& b) { return a.flat_offset < b.flat_offset; });
    if (f.numel == 0) return absl::InvalidArgumentError("plan: an empty fragment; use fewer");
  }
  // Shards: heaviest fragment first into the lightest shard.
  std::vector<uint32_t> order(num_fragments);
  std::iota(order.begin(), order.end(), 0u);
  std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    return plan.fragments_[a].numel > plan.fragments_[b].numel;
  });
  std::vector<uint64_t> shard_load(num_shards, 0);
  for (uint32_t id : order) {
    size_t s = Lightest(shard_load);
    plan.fragments_[id].shard = static_cast<uint32_t>(s);
    shard_load[s] += plan.fragments_[id].numel;
  }

  Hasher h;
  h.Update("diloco-plan-v1");
  h.UpdateValue(manifest.fingerprint());
  h.UpdateValue(num_fragments);
  h.UpdateValue(num_shards);
  for (const auto& f : plan.fragments_) {
    h.UpdateValue(f.shard);
    for (const auto& p : f.pieces) {
      h.UpdateValue(p.flat_offset);
      h.UpdateValue(p.length);
    }
  }
  plan.fingerprint_ = h.Digest();
  return plan;
}

std::vector<uint32_t> Plan::FragmentsOfShard(uint32_t shard) const {
  std::vector<uint32_t> ids;
  for (const auto& f : fragments_)
    if (f.shard == shard) ids.push_back(f.id);
  return ids;
}

void Plan::Gather(const Fragment& f, const float* flat, float* out) const {
  for (const auto& p : f.pieces) {
    std::memcpy(out, flat + p.flat_offset, p.length * sizeof(float));
    out += p.length;
  }
}

void Plan::Scatter(const Fragment& f, const float* in, float* flat) const {
  for (const auto& p : f.pieces) {
    std::memcpy(flat + p.flat_offset, in, p.length * sizeof(float));
    in += p.length;
  }
}

}  // namespace diloco
