// The plan: a deterministic cut of the flat parameter space into P fragments, and an
// assignment of fragments to S shards. A pure function of (manifest, P, S): server and worker
// compute it independently and compare fingerprints on every message.
//
// Tensors are bin-packed (largest first, into the lightest fragment) against a budget of
// ceil(total / P) elements; a tensor larger than the budget is first split into contiguous
// pieces of at most the budget. Fragments are then assigned to shards the same way by bytes.
// A fragment is a list of pieces of the flat buffer; its own values are the concatenation of
// its pieces in list order.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "common/manifest.h"

namespace diloco {

struct Piece {
  uint64_t flat_offset = 0;  // start in the flat parameter buffer
  uint64_t length = 0;       // elements
};

struct Fragment {
  uint32_t id = 0;
  uint32_t shard = 0;
  uint64_t numel = 0;
  std::vector<Piece> pieces;
};

class Plan {
 public:
  static absl::StatusOr<Plan> Create(const Manifest& manifest, uint32_t num_fragments,
                                     uint32_t num_shards);

  uint64_t fingerprint() const { return fingerprint_; }
  uint32_t num_shards() const { return num_shards_; }
  const std::vector<Fragment>& fragments() const { return fragments_; }
  const Fragment& fragment(uint32_t id) const { return fragments_[id]; }
  std::vector<uint32_t> FragmentsOfShard(uint32_t shard) const;
  uint64_t total_elements() const { return total_; }

  // Copies a fragment's pieces out of / into the flat buffer.
  void Gather(const Fragment& f, const float* flat, float* out) const;
  void Scatter(const Fragment& f, const float* in, float* flat) const;

 private:
  std::vector<Fragment> fragments_;
  uint32_t num_shards_ = 0;
  uint64_t total_ = 0;
  uint64_t fingerprint_ = 0;
};

}  // namespace diloco
