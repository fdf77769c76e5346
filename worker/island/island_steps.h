// Keeps an island's ranks in step with rank 0, which alone runs the sync client.
//
// Before every inner step the ranks exchange one order from rank 0: stop or go on, the step's
// learning rate (a schedule driven by the clock would differ between ranks otherwise), and the
// parameter ranges rank 0's sync client changed since the last order (adopted fragments,
// re-anchors, a push's extrapolation), followed by those ranges' values. So adoptions reach every
// rank at the same step boundary and the ranks stay identical bit for bit: the gradients they step
// on are all-reduced (the same bytes on every rank), and everything else that writes the parameters
// goes through here.
//
// Which ranges changed: rank 0 hands its sync client the parameters through Range(), which
// notes each range with a checksum of its values then; at the next order, the ranges whose
// checksum moved are sent. A push that only reads its fragment (lockstep, or no extrapolation)
// costs two checksums, nothing on the wire; an extrapolating push moved it, and its fragment is
// sent. More than kMaxRanges changed ranges go as the whole model.
//
// Every `check_every` steps (and at the end) the ranks compare a checksum of their whole
// parameters (Island::CheckSame): a divergence stops the island with an error naming the ranks.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "worker/island/island.h"
#include "worker/trainer.h"

namespace diloco::island {

struct Order {
  bool stop = false;
  float lr = 0;
};

class IslandSteps {
 public:
  static constexpr int kMaxRanges = 64;

  // Both must outlive this object.
  IslandSteps(Island& island, Trainer& trainer) : island_(island), trainer_(trainer) {}

  // Rank 0: the parameters the sync client reads and writes (its ParamsFn).
  std::span<float> Range(uint64_t offset, uint64_t n);

  // Every rank, before each inner step: rank 0 sends `mine` with the ranges changed since the
  // last call, the other ranks receive them into their parameters. Returns rank 0's order.
  // `timeout` (when positive) overrides the island's collective timeout for this exchange.
  absl::StatusOr<Order> Exchange(const Order& mine, absl::Duration timeout = absl::ZeroDuration());

  // Rank 0's whole model on every rank (after the join to the shards and after the drain).
  absl::Status BroadcastAll(absl::Duration timeout = absl::ZeroDuration());

  // Every rank: the checksum of its parameters against rank 0's.
  absl::Status Check(int64_t step);

  // Ranges and bytes sent (rank 0) or received (others) after the join.
  uint64_t ranges_moved() const { return ranges_moved_; }
  uint64_t floats_moved() const { return floats_moved_; }

 private:
  struct Noted {
    uint64_t offset, n, checksum;
  };
  Island& island_;
  Trainer& trainer_;
  std::vector<Noted> noted_;  // rank 0: handed out since the last order
  std::vector<int64_t> header_ = std::vector<int64_t>(4 + 2 * kMaxRanges);
  uint64_t ranges_moved_ = 0, floats_moved_ = 0;
};

// The checksum the ranks compare (and workers log as params_checksum).
uint64_t ParamsChecksum(std::span<const float> p);

}  // namespace diloco::island
