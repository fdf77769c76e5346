// Server-side merge and outer-step rules beyond the plain Nesterov step of optim.h:
//
// RDA merge (an option beside the weighted mean): given K dense fp32 deltas d_k with weights w_k >=
// 0,
//     W     = sum_k w_k                              (must be > 0)
//     n_k   = ||d_k||_2                              (computed in double)
//     nbar  = sum_k w_k n_k / W                      weighted mean of the norms
//     u_k   = d_k / n_k   (u_k = 0 when n_k = 0)     unit directions
//     ubar  = sum_k w_k u_k / W                      weighted mean of the directions
//     out   = nbar * ubar / ||ubar||_2   (out = 0 when ||ubar|| = 0)
//   i.e. the merged delta points along the mean direction and has the mean norm. Unlike the
//   plain weighted mean, disagreeing directions do not shrink the step.
//
// Delayed Nesterov (per-arrival mode, Liu et al. 2024), with period N and NesterovParams lr, mu.
// State: the momentum m (owned by the caller, as for NesterovStep), a sum s of the deltas that
// arrived in the current period and their count j. On each arrival of delta g:
//     theta -= (lr / N) * g;  s += g;  j += 1
//     if j == N:  gbar = s / N;  m = mu*m + gbar;  theta -= lr*mu*m;  s = 0;  j = 0
//   Over one period theta moves by lr*(gbar + mu*(mu*m + gbar)), exactly one synchronous
//   Nesterov step (optim.h) on the mean of the N deltas; between momentum updates each arrival
//   takes a plain SGD step, so N simultaneous pushes never compound momentum N times.
//
// Partial Nesterov step (a round that holds a share s in (0, 1] of a full round's work, the
// delta d already scaled by s): the optimizer advances by s of one step,
//     m = (1 - s*(1 - mu))*m + d;  theta -= lr*(d + s*mu*m)
// s = 1 is NesterovStep exactly. Rounds of share s, 1/s per full round, with d = s*D reach the
// same velocity as full rounds of D (m -> D/(1 - mu), lr*D/(1 - mu) per full round's worth,
// with the momentum's memory measured in full rounds' worth), and a round that holds a sliver
// of the work after full ones (one worker's push, the last pushes of a run) moves theta by a
// sliver of the momentum too; a whole step would add lr*mu*m, most of a full round's move.
//
// Composed Nesterov step (the same rounds, composing exactly): a fragment keeps a phase S in
// [0, 1), the share of the current full round's work already stepped on. A round of share s
// steps S0 = S -> S1 = S + s (a round that crosses 1 is cut there, its delta split by share);
// with p the momentum buffer,
//     if S0 == 0:  p = mu*p                        a full round starts: the momentum decays
//     p1 = p + d;  theta -= lr*(d + mu*(S1*p1 - S0*p));  p = p1;  S = S1 (0 once S1 reaches 1)
// Mid-round p is the momentum the full round will end with if nothing more arrives. Rounds
// whose shares add up to 1 and whose deltas add up to D then leave theta and p exactly where
// one Nesterov step on D leaves them, whatever the cut (the look-ahead terms telescope to
// mu*p at S = 1); a single round of share 1 from phase 0 is NesterovStep. A round holding a
// sliver moves theta by its delta and a sliver of the look-ahead. PartialNesterovStep differs
// from it in composition only: its decay and look-ahead are linear in s per round, so four
// quarter rounds at mu = 0.9 decay the momentum by 0.975^4 = 0.904 and look ahead by 0.625*mu
// on the full round's delta, where one Nesterov step does by 0.9 and mu.
//
// Staleness discount (optional, off by default): weight factor (1 + s)^-alpha for a push of
// staleness s = v_p - base_version >= 0; alpha = 0 gives 1.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "kernels/optim_params.h"

namespace diloco::kernels {

// out.size() must equal every deltas[k].size(); weights.size() == deltas.size().
absl::Status RdaMerge(std::span<const std::span<const float>> deltas,
                      std::span<const float> weights, std::span<float> out);

float StalenessDiscount(int64_t staleness, float alpha);

// theta -= lr * d, no momentum: the top-k pushes' outer step beside a dense one
// (server/outer_step.h). On theta, exactly the Nesterov step with mu = 0 (d + 0 * m is d).
// theta and d must have the same size (InvalidArgument otherwise, nothing changed).
absl::Status SgdStep(float lr, std::span<float> theta, std::span<const float> d);

// theta, m and d must have the same size; share in (0, 1] (InvalidArgument otherwise).
absl::Status PartialNesterovStep(const NesterovParams& p, double share, std::span<float> theta,
                                 std::span<float> m, std::span<const float> d);

// `phase` in [0, 1) is read and advanced; share in (0, 1] (InvalidArgument otherwise, and on
// mismatched sizes or a phase out of range; nothing is changed then).
absl::Status ComposedNesterovStep(const NesterovParams& p, double share, double* phase,
                                  std::span<float> theta, std::span<float> m,
                                  std::span<const float> d);

class DelayedNesterov {
 public:
  // `period` (N >= 1) arrivals per momentum update; `size` values per fragment.
  DelayedNesterov(NesterovParams p, int period, size_t size);

  // One arrival of delta g (as above). theta, m and g must all have size() values.
  absl::Status Arrive(std::span<float> theta, std::span<float> m, std::span<const float> g);

  int period() const { return period_; }
  // Arrivals since the last momentum update (0..N-1).
  int pending() const { return pending_; }
  size_t size() const { return sum_.size(); }

 private:
  NesterovParams p_;
  int period_;
  int pending_ = 0;
  std::vector<float> sum_;
};

}  // namespace diloco::kernels
