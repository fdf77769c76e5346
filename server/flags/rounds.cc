// diloco-server --help, group "rounds": When a round closes and what it does: the quorum and grace
// window, push weights and staleness, the push guard, the merge and the outer Nesterov step. Read
// by server_flags.cc (declared in server/flags/flags.h).
#include <cstdint>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "server/flags/flags.h"

using diloco::server::MergeOrder;
using diloco::server::MergeRule;
using diloco::server::OuterChoice;
using diloco::server::OuterMode;
using diloco::server::RoundNorm;
using diloco::server::RoundStep;
using diloco::server::WeightScheme;

ABSL_FLAG(uint32_t, quorum, 1, "K: pushes before a round may close (or --grace_cap)");
ABSL_FLAG(bool, elastic_quorum, false,
          "a round short of --quorum also closes once every live worker (heard from within "
          "--worker_timeout) has pushed: the quorum re-forms around the live workers");
ABSL_FLAG(absl::Duration, grace_cap, absl::Seconds(5), "no round stays open longer than this");
ABSL_FLAG(double, grace_gamma, 1.0,
          "adaptive grace window factor: a round waits this many fleet push cadences (less the "
          "time to its quorum) for the workers not yet in it");
ABSL_FLAG(WeightScheme, weights, WeightScheme::kTokensSqOverSteps,
          "tokens2_over_steps, tokens or uniform");
ABSL_FLAG(double, staleness_alpha, 1.0,
          "staleness discount: a push s versions stale weighs (1+s)^-alpha of its weight; 0 = "
          "off");
ABSL_FLAG(uint64_t, max_staleness, 16, "pushes staler than this are refused");
ABSL_FLAG(double, push_steps_cap, 4,
          "push guard: a push claiming more than this many times the median steps of the "
          "fragment's last 32 accepted pushes (once 8 are known) is weighed as if it held that "
          "many steps, its tokens scaled alike; counted (pushes_weight_capped) and logged; 0 = "
          "off, else at least 1");
ABSL_FLAG(double, push_norm_cap, 4,
          "push guard: a push whose delta's L2 norm exceeds this many times the median norm of "
          "the fragment's last 32 accepted pushes (once 8 are known) is scaled down to that norm "
          "before it is merged; counted (pushes_norm_clipped) and logged; 0 = off, else at "
          "least 1");
ABSL_FLAG(OuterMode, outer, OuterMode::kRounds,
          "rounds (one Nesterov step per merged round) or delayed-nesterov (per arrival)");
ABSL_FLAG(int, dn_period, 4, "delayed-nesterov: arrivals per momentum update (N)");
ABSL_FLAG(MergeRule, merge, MergeRule::kWeightedMean,
          "merge rule of a round: mean (weighted) or rda");
ABSL_FLAG(MergeOrder, merge_order, MergeOrder::kArrival,
          "order a round's pushes are merged in: arrival (each as it arrives) or worker (held "
          "until the round closes, then by worker id: the same pushes give the same bits "
          "whatever their arrival order, so a --lockstep fleet is reproducible run to run)");
ABSL_FLAG(RoundNorm, round_norm, RoundNorm::kExpected,
          "what a round's weighted sum is divided by: expected (its weight plus the expected "
          "weight of each live worker missing from it, an absent worker counting as a zero "
          "delta) or arrived (its own weight: one lone push takes a whole step)");
ABSL_FLAG(RoundStep, round_step, RoundStep::kPartial,
          "how far a round's Nesterov step goes: partial (a round holding a share s of a full "
          "round's work advances the momentum by s of a step), composed (the same, such that "
          "rounds adding up to a full round take exactly one Nesterov step) or full (a whole "
          "step each)");
ABSL_FLAG(OuterChoice, outer_step, OuterChoice::kAuto,
          "the outer step: nesterov (--outer_lr, --outer_momentum) for every push, sparse (no "
          "momentum, --sparse_outer_lr: the step of top-k pushes with error feedback) for every "
          "push, or auto: each push takes the one its codec asks for (top-k: sparse, any other "
          "codec: nesterov; with --outer=delayed-nesterov the first push of a fragment chooses and "
          "a push of "
          "the other kind is refused)");
ABSL_FLAG(double, outer_lr, 1.3, "outer Nesterov learning rate");
ABSL_FLAG(double, outer_momentum, 0.7, "outer Nesterov momentum");
ABSL_FLAG(double, sparse_outer_lr, 4.0,
          "the sparse outer step's learning rate (--outer_step=sparse, or auto with top-k "
          "pushes; no momentum)");
