// diloco-worker --help, group "sync": The fleet and how this learner syncs with it: the shards, its
// id, the push codec, H and the adoption of global values, the join and the drain. Read by
// worker_flags.cc (declared in worker/flags/flags.h).
#include <string>

#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "worker/flags/flags.h"

using diloco::worker::SyncOptions;

ABSL_FLAG(std::string, servers, "",
          "comma-separated shard endpoints, shard i at position i (empty: train without sync)");
ABSL_FLAG(uint32_t, worker_id, 0, "this worker's id (unique in the fleet)");
ABSL_FLAG(uint64_t, generation, 0, "worker generation (0: from the clock, new on each start)");
ABSL_FLAG(std::string, codec, "int8:256",
          "push codec: fp32, bf16, fp8, int8, int4 [:block], topk:<fraction>[:block] (sparse, "
          "kernels/topk.h), or auto: one of --auto_codecs, chosen from the measured link "
          "(worker/link_plan.h)");
ABSL_FLAG(std::string, auto_codecs, "int8:256,int4:256,topk:0.0429",
          "--codec=auto: the codecs to choose from, finest first");
ABSL_FLAG(std::string, inner_steps, "50",
          "H: inner steps between pushes of a fragment, or auto: from --inner_steps_min to "
          "--inner_steps_max, chosen from the measured link and step time");
ABSL_FLAG(uint32_t, inner_steps_min, 50, "--inner_steps=auto: the smallest H");
ABSL_FLAG(uint32_t, inner_steps_max, 2000, "--inner_steps=auto: the largest H");
ABSL_FLAG(bool, dylu, false, "Dynamic Local Updates: scale H by this worker's relative speed");
ABSL_FLAG(bool, stream, true, "stagger fragments' pushes across the H steps");
ABSL_FLAG(SyncOptions::Adopt, adopt, SyncOptions::Adopt::kKeep,
          "adoption of new global values: keep (local = global + the steps taken since the "
          "push) or lerp (local = global + adopt_alpha*(local - global); alpha 0 replaces)");
ABSL_FLAG(double, adopt_alpha, 0.0, "--adopt=lerp: local = global + alpha*(local - global)");
ABSL_FLAG(double, extrapolate, 1.25,
          "--adopt=keep: at each push, move the local values on to anchor - c x delta, so the "
          "steps trained until its answer start nearer where the round lands (the adoption "
          "takes c x delta out again); in [1, 3], 1 off. Not applied in --lockstep without "
          "--lockstep_overlap (nothing is trained while a push is out)");
ABSL_FLAG(bool, align_pushes, true,
          "asynchronous --adopt=keep: a fragment's next push comes as many steps later than H "
          "as the shard held its last one before the round closed (at most H/2), so that the "
          "fleet's pushes of a round leave together; false only to measure what it is worth");
ABSL_FLAG(uint32_t, carry_max, 8,
          "the most local steps a fragment carries into a push, in units of --inner_steps: a "
          "fragment whose push was answered so late that more steps piled up re-anchors on the "
          "last global values (its local work since is dropped)");
ABSL_FLAG(bool, lockstep, false,
          "deterministic mode: after a push, wait for its answer and adopt it before the next "
          "step (a fixed sequence of steps and rounds; with the shards' --quorum = workers, "
          "synchronous DiLoCo)");
ABSL_FLAG(uint32_t, lockstep_overlap, 0,
          "--lockstep only: adopt each push's answer exactly this many steps after the push, "
          "training meanwhile (a fixed overlap, as an asynchronous worker's, in a run that "
          "repeats exactly; below --inner_steps)");
ABSL_FLAG(bool, error_feedback, true,
          "keep each push's quantisation error and add it to the next push (false: study only)");
ABSL_FLAG(double, ef_decay, 0.0,
          "error feedback's decay: each push encodes ef_decay x the residual + its delta, in "
          "(0, 1]; 1 keeps the whole residual. 0: the codec's own (0.8 for top-k pushes, as "
          "SparseLoCo decays its residual; 1 for the others)");
ABSL_FLAG(absl::Duration, join_timeout, absl::Seconds(60),
          "wait this long for the join before training starts");
ABSL_FLAG(bool, train_unjoined, true,
          "if the join is not done by --join_timeout: train unsynced and keep joining in the "
          "background (false: exit with an error)");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(10),
          "on a clean stop, wait for in-flight pushes to be answered until this long passes with "
          "no answer");
