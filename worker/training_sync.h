// The sync client's training-thread half: per fragment, the global version adopted last (the
// anchor), the local steps and tokens the model holds beyond it, and the push outstanding.
// It adopts what the I/O thread delivers (keep or lerp, docs/worker.md "Adoption"), takes the
// pushes that are due (delta = anchor - local), and bounds the local work a fragment carries
// into a push.
//
// The bound: a fragment never carries more than carry_max x H local steps into a push. A push
// answered late (lost on the way and resent, answered Stale, or a Duplicate found after a shard
// restart) leaves every step taken since in the local model; kept, they went out as one push
// claiming all their steps and tokens, which the shard weighted as dozens of normal pushes and
// whose drift, taken on a global model that had long moved on, wrecked the fragment (the chaos
// suite's seeded run ended worse than theta(0)). Past the bound the fragment re-anchors on the
// fleet's model: local = the last adopted global values, steps and tokens from 0
// (SyncStats::reanchors, a "reanchor" event).
//
// Extrapolation (SyncOptions::extrapolate, c; PushExtrapolation says where it applies): while a
// push is out the worker trains on, and its answer moves the fragment by the fleet's outer
// step, which is larger than this worker's own delta (averaged deltas plus momentum). Steps
// taken from local = anchor - delta are taken from behind where the answer lands and were
// measured to cost 1-2% of loss at 13-15 steps of overlap in 50 (benchmarks/quality/RESULTS.md,
// "What the overlap costs"). So at a push the local values move on to anchor - c x delta; the
// adoption of values that hold the push takes c x delta out (local = global + the steps since),
// and a push that ends unapplied puts (c - 1) x delta back, so its work is pushed again as it
// was.
//
// Alignment (SyncOptions::align_pushes; PushAlignment says where it applies): an asynchronous
// round closes when its last push arrives (or its grace window ends), and the workers that
// pushed earlier train on meanwhile from values the round is about to move. Left alone, how
// long the shard holds their pushes stays what the workers' start times made it: with four
// equally fast workers, pushes 17-25 steps apart and holds of 6-14 steps in 50, round after
// round. The Applied answer says how long the shard held the push (held_us, its own clock, so a
// slow download adds nothing); the fragment's next push comes that many of this worker's steps
// (rounded down) later than H, at most H / 2 later, so the pushes of a round leave together
// after a round or two. The last pusher of a round, held for less than a step, keeps H; so does
// everyone once aligned. A worker that stops training for a while (an evaluation) falls behind
// by that much, and the others follow it in the next round: their rounds grow by the pause, so
// diloco-worker evaluates where the fleet adopts a round together (worker/eval_schedule.h).
// What it is worth: benchmarks/quality/RESULTS.md, "Aligned pushes".
//
// Steps and tokens reported with a push are those its delta holds: a push that ends unapplied
// leaves its delta in the local model, so its steps and tokens count again towards the next.
//
// No sockets, no threads, no clock: the I/O side reaches it only through SyncShared, so tests
// drive it with hand-built arrivals (tests/worker/training_sync_test.cc).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/time/time.h"
#include "common/plan.h"
#include "worker/delta_pool.h"
#include "worker/sync_options.h"
#include "worker/sync_shared.h"

namespace diloco::worker {

class TrainingSync {
 public:
  // params(offset, n): elements [offset, offset + n) of the flat local model.
  using ParamsFn = absl::FunctionRef<std::span<float>(uint64_t offset, uint64_t n)>;

  // Everything passed must outlive this object.
  TrainingSync(const SyncOptions& opt, const Plan& plan, SyncShared& shared);

  // One arrival from the I/O thread: adopts an update, ends a push, forgets a version, or
  // queues theta(0) / the fleet's last values for a shard that has none.
  void Process(ParamsFn params, Arrival& a);

  // After one inner step of `tokens`: counts it towards every fragment and returns the pushes
  // now due (none while `draining`), each fragment's H being `h`, encoded with `codec`. A
  // fragment past the bound is re-anchored instead of pushed.
  std::vector<PushJob> Step(ParamsFn params, uint64_t tokens, uint32_t h, kernels::Codec codec,
                            bool draining);

  // H changed (--inner_steps=auto, worker/link_plan.h): with streaming, fragment i's next push
  // comes (i + 1) / F of the new H from now, so that pushes stay spread over the round instead
  // of all falling due at once when H shrinks.
  void Restagger(uint32_t h);

  bool outstanding(uint32_t fragment) const { return frags_[fragment].outstanding; }
  uint32_t joined_count() const { return joined_count_; }
  bool all_joined() const { return joined_count_ == frags_.size(); }
  // The last adopted global model, flat (fragments not yet adopted hold zeros).
  std::span<const float> anchor() const { return anchor_; }
  // The most local steps a push may carry: carry_max x H (the larger of the configured H and
  // the one of the last step: --inner_steps=auto may raise it).
  int64_t carry_bound() const;
  // The buffers of the outstanding pushes' deltas (worker/delta_pool.h).
  const DeltaPool& delta_pool() const { return pool_; }

 private:
  struct Fragment {
    const diloco::Fragment* spec = nullptr;
    bool joined = false;   // pulled at least once: local started from the global values
    uint64_t version = 0;  // adopted global version (0 after a shard restart: take any)
    // The newest keyframe it holds (docs/protocol.md, "Keyframes"; 0: none), its values in
    // keyframe_ when it is not `version` (a version between keyframes).
    uint64_t keyframe = 0;
    // Local steps and tokens in (local - anchor) beyond the outstanding push's delta (kKeep;
    // kLerp: since the last adoption).
    int64_t steps = 0;
    uint64_t tokens = 0;
    // Extra steps before the next push (streaming's stagger before the first; alignment's after
    // a held push).
    int64_t offset = 0;
    uint64_t next_seq = 1;
    bool outstanding = false;
    // kKeep: the outstanding push's delta is no longer in (local - anchor): an adoption while
    // it was outstanding took it out (assuming it applied), or a re-anchor dropped it. Its
    // own answer must not take it again, and if it ends unapplied its work is gone.
    bool delta_taken = false;
    int64_t pushed_steps = 0;  // what the outstanding push claimed
    uint64_t pushed_tokens = 0;
    // Taken from the pool and written in Step when a push is due; read by the fragment's shard
    // session while the push is outstanding (PushJob::delta); back to the pool when it ends.
    DeltaPool::Buffer delta;
  };

  void Adopt(ParamsFn params, Arrival& a);
  // local = anchor over the fragment; counted afresh.
  void Reanchor(ParamsFn params, Fragment& f);
  void CountReanchor(const Fragment& f);
  // The push has ended (answered, or ended unapplied): its delta buffer goes back to the pool.
  void ReleaseDelta(Fragment& f);
  // local += a x the outstanding push's delta, over the fragment's pieces.
  void MoveAlongDelta(ParamsFn params, const Fragment& f, float a);
  // The answer of f's push says the shard held it `held`: its next push comes as many of this
  // worker's steps later (the header's "Alignment").
  void Align(Fragment& f, absl::Duration held);

  const SyncOptions& opt_;
  const Plan& plan_;
  SyncShared& shared_;
  const float extrapolate_;    // PushExtrapolation(opt_)
  const bool align_;           // PushAlignment(opt_)
  std::vector<float> anchor_;  // flat: global values adopted last
  // Flat: the values of each fragment's keyframe while apart from anchor_ (allocated with the
  // first: shards whose downloads have keyframes, 4 bytes per parameter).
  std::vector<float> keyframe_;
  DeltaPool pool_;
  std::vector<Fragment> frags_;
  uint32_t joined_count_ = 0;
  uint32_t h_ = 0;                     // the last step's H
  std::vector<float> update_scratch_;  // a chunk of a fragment rebuilt from quantized updates
};

}  // namespace diloco::worker
