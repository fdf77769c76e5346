// The push codec and H chosen from the measured link (--codec=auto, --inner_steps=auto).
//
// Why: a push and the update that answers it must cross the worker's link within the H steps
// of its round, or the fragment's next push waits for the answer (the WAN rows' push_ratio
// below 1) and everything arrives rounds stale; and on a fast link a bigger H or a coarser codec
// only costs loss. The right pair depends on the link (10 Mbit/s home uplinks to 10 Gbit/s
// between data centres) and on the step time, so a user should not have to tune it by hand.
//
// The rule. In a round of H steps the worker pushes every fragment once and receives one update
// of each, which takes, at the link's measured rates (worker/link_meter.h),
//   need(codec) = push_bytes(codec) / up_rate + update_bytes / down_rate
// (push bytes exact from the codec's layout; update bytes per parameter measured from the
// updates received, 4, fp32, assumed before the first). A choice fits when
//   margin x need(codec) <= H x step_time.
// Choices form one ladder, from the most precise and frequent to the least: each of the
// codecs at the smallest H (int8 then int4 by default: int4 cost 0.13% of held-out loss in the
// study's frontier group, benchmarks/quality/RESULTS.md), then the last codec at H growing by 25% a
// rung up to the largest H. The choice is the finest rung that fits (the coarsest when none does).
// To keep it from flapping with the measurement's noise, a worker takes a coarser rung as soon as
// its own stops fitting, but a finer one only when that one fits with margin / hysteresis.
//
// Pure: the caller (worker/sync_client.cc) passes the measurements; tests drive it directly.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/codec.h"

namespace diloco::worker {

struct LinkPlanOptions {
  std::vector<kernels::Codec> codecs;  // most precise first; one: the codec is fixed
  uint32_t h_min = 50, h_max = 50;     // equal: H is fixed
  double margin = 1.5;
  double hysteresis = 0.7;
};

struct LinkMeasure {
  double up_bytes_per_s = 0, down_bytes_per_s = 0;  // 0: not measured yet
  double step_s = 0;                                // this worker's step time; 0: unknown
  double down_bytes_per_param = 0;                  // of the updates received; 0: unknown
};

struct LinkChoice {
  kernels::Codec codec;
  uint32_t h = 0;
  double need_s = 0;    // one round's transfers at this choice (0 before a measurement)
  double budget_s = 0;  // H x step time
};

class LinkPlanner {
 public:
  // `fragment_numels`: the parameters of each fragment this worker pushes once per round.
  LinkPlanner(LinkPlanOptions opt, std::vector<uint64_t> fragment_numels);

  // Chooses again from `m`; keeps the current choice until both rates and the step time are
  // measured. Returns whether the choice changed.
  bool Update(const LinkMeasure& m);
  const LinkChoice& choice() const { return choice_; }
  // The ladder's rungs, finest first (tests, docs).
  size_t rungs() const { return rungs_.size(); }
  LinkChoice Rung(size_t i) const;
  // One round's transfer time with `codec`: push bytes up plus update bytes down.
  double Need(const kernels::Codec& codec, const LinkMeasure& m) const;

 private:
  struct RungSpec {
    uint32_t codec = 0;  // index into opt_.codecs
    uint32_t h = 0;
  };
  // The finest rung that fits with `margin`; the coarsest when none does.
  size_t FinestFitting(const LinkMeasure& m, double margin) const;

  LinkPlanOptions opt_;
  std::vector<uint64_t> numels_;
  uint64_t params_ = 0;
  std::vector<RungSpec> rungs_;
  size_t rung_ = 0;
  LinkChoice choice_;
};

// "int8:256 H 200" (logs and events).
std::string Describe(const LinkChoice& c);

}  // namespace diloco::worker
