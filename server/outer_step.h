// How a fragment's merged delta moves theta and the momentum (ShardOptions::outer_mode, ::step):
//   kRounds, kFull      every round is one whole kernels::NesterovStep;
//   kRounds, kPartial   kernels::PartialNesterovStep: a round holding a share s of a full round's
//                       work goes s of the way (default);
//   kRounds, kComposed  kernels::ComposedNesterovStep: the step owns the fragment's phase, so that
//                       rounds whose shares add up to a full round take one Nesterov step;
//   kDelayedNesterov    kernels::DelayedNesterov, owned by the step: every push is a round of its
//                       own, closed as it arrives (PerArrival).
// One object per fragment, so the shard's rounds ask it instead of branching on the mode. A round
// whose theta is still being sent writes the new theta into its accumulator chunk by chunk
// (Shard::StepRound): the rules that allow it step in parts (StepPart per chunk, every part from
// the state the round found, then Commit once), bit for bit the step taken whole.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "kernels/optim.h"

namespace diloco::server {

// How a fragment's outer step is taken:
//   kRounds: merge every push of a round, then exactly one Nesterov step (default);
//   kDelayedNesterov: per arrival, a plain SGD step of g/N, momentum updated every N arrivals
//   (kernels/outer.h); every push is its own version.
enum class OuterMode { kRounds, kDelayedNesterov };
// How far a round's Nesterov step goes (kernels/outer.h, PartialNesterovStep):
//   kPartial: a round holding a share s of a full round's work (RoundNorm) advances the
//     momentum by s of a step too: decay and look-ahead scaled by s (default);
//   kComposed: the same, composing exactly (kernels::ComposedNesterovStep): rounds whose
//     shares add up to one full round take exactly one Nesterov step on their summed delta;
//   kFull: every round is a whole Nesterov step on its normalised delta; a round holding one
//     worker's push still takes a whole momentum step.
enum class RoundStep { kPartial, kComposed, kFull };
// Which learning rate and momentum the step takes (ShardOptions::outer_choice; docs/protocol.md
// "Sparse top-k pushes"):
//   kNesterov: ShardOptions::outer for every push;
//   kSparse: ShardOptions::sparse_outer (no momentum, a larger lr) for every push;
//   kAuto: each push takes the step its codec asks for, so a fleet of top-k pushes never steps
//     with the dense codecs' momentum unasked and a worker may switch between the kinds (its
//     --codec=auto): with rounds, a round's top-k pushes merge apart from its dense ones and step
//     by sparse_outer's lr without momentum (MakeSparseStep) after the dense ones' Nesterov step
//     by outer; per arrival (Delayed Nesterov) each fragment takes the step its first push in
//     this process asks for and refuses a push of the other kind.
enum class OuterChoice { kAuto, kNesterov, kSparse };

class OuterStep {
 public:
  virtual ~OuterStep() = default;

  // Every push is a round of its own (Delayed Nesterov): closed as it arrives, not by the
  // RoundPolicy, and not normalised by the expected weight of the workers missing from it.
  virtual bool PerArrival() const { return false; }
  // Whether the step may be taken in parts (StepPart on ranges of the fragment, then Commit);
  // otherwise only on the whole fragment (Step).
  virtual bool Splits() const { return true; }

  // The round's step on the whole fragment, in place: theta and the momentum m move by the
  // merged delta d, scaled to `share` (in (0, 1]) of a full round.
  void Step(double share, std::span<float> theta, std::span<float> m, std::span<const float> d) {
    StepPart(share, theta, m, d);
    Commit();
  }
  // One part of the round's step: theta, m and d are the same range of the fragment's values
  // (the whole fragment unless Splits()). Every part reads the state the round found, so the
  // parts of one round, together covering the fragment, give Step's values bit for bit.
  virtual void StepPart(double share, std::span<float> theta, std::span<float> m,
                        std::span<const float> d) = 0;
  // The round's parts are all stepped: the rule's state (the composed step's phase) advances.
  virtual void Commit() {}
};

// The step for a fragment of `numel` values; `step` only matters with OuterMode::kRounds,
// `dn_period` (arrivals per momentum update) only with kDelayedNesterov.
std::unique_ptr<OuterStep> MakeOuterStep(OuterMode mode, RoundStep step,
                                         const kernels::NesterovParams& p, int dn_period,
                                         uint64_t numel);

// The top-k pushes' step beside a dense lane in the same round (OuterChoice::kAuto with rounds,
// Shard::LaneOf): theta -= lr x d, without momentum and without touching m, which is the dense
// lane's; the round's share is already in d. On theta, bit for bit the Nesterov steps with
// momentum 0 that kSparse takes.
std::unique_ptr<OuterStep> MakeSparseStep(float lr);

}  // namespace diloco::server
