// The shard's guard against one push dominating a round. A push's weight grows with what it
// claims (tokens^2/steps by default) and its delta is taken as sent, so a push that carries far
// more local steps than the fleet's cadence (one answered very late after thousands of steps)
// or a learner that produces finite but huge deltas would make most of a round's merged delta,
// and the Nesterov step (lr > 1, momentum) would move theta by a multiple of that drift.
// Two caps, each relative to the median of the fragment's recent accepted pushes:
//   steps: a push claiming more than cap x the median steps is weighed as if it held cap x
//     median steps, its tokens scaled by the same ratio (tokens^2/steps and tokens weights scale
//     by that ratio; uniform weights do not change);
//   norm: a push whose decoded delta's L2 norm exceeds cap x the median norm is scaled down to
//     that norm before it is merged (weighted mean and RDA alike).
// Each cap arms once its window holds kMinSamples pushes (a fresh or restarted shard merges its
// first pushes as they are), and records the capped value, so a faulty worker cannot drag the
// median up. A cap of 0 turns it off. The steps cap runs on the shard's I/O thread, the norm cap
// on the fragment's apply thread (DecodeGuarded), one instance per fragment each.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "kernels/codec_kind.h"
#include "schema/transport.h"
#include "server/round_merge.h"
#include "server/round_policy.h"

namespace diloco::server {

// Caps at cap x the median of the last kWindow admitted values, once kMinSamples are known.
class MedianCap {
 public:
  static constexpr size_t kWindow = 32;
  static constexpr size_t kMinSamples = 8;

  explicit MedianCap(double cap = 0) : cap_(cap) {}

  struct Admitted {
    double value = 0;     // what the push counts as: min(claimed, limit)
    double limit = 0;     // cap x median; 0 while the cap is off or not armed
    bool capped = false;  // value < claimed
  };
  // A push claiming `v` (finite, >= 0) is admitted; the ring records the admitted value. A
  // median of 0 (a fleet of zero deltas) caps nothing.
  Admitted Admit(double v);
  // The lower median of the window (0 when empty).
  double Median() const;
  size_t samples() const { return ring_.size(); }
  bool on() const { return cap_ > 0; }

 private:
  double cap_;
  std::vector<double> ring_;  // up to kWindow values, the oldest at next_ once full
  size_t next_ = 0;
};

// What a push's weight is multiplied by when its steps (and tokens) are scaled by `ratio` <= 1.
double CappedWeightFactor(WeightScheme scheme, double ratio);

// One push's decode into its round (RoundMerge::Target), with the norm cap.
struct GuardedDecode {
  bool ok = true;                // every chunk decoded (always, after wire::CheckEncodedPayload)
  double norm = 0;               // the L2 norm of the decoded delta as sent (0 without a norm cap)
  MedianCap::Admitted admitted;  // the norm cap's answer (capped: the delta was scaled)
};
// Decodes `m`'s payload of `numel` values with `codec` where `t` says. With `norm` on, the
// delta's L2 norm is measured first (a decode into `t` when it overwrites, else a decode pass
// through `scratch`) and a delta over the cap is merged scaled by limit / norm.
GuardedDecode DecodeGuarded(kernels::Codec codec, const wire::Message& m, uint64_t numel,
                            const RoundMerge::Target& t, MedianCap* norm,
                            std::vector<float>& scratch);

}  // namespace diloco::server
