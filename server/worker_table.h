// The workers a shard knows: who they are (id, generation, connections), when each was last seen,
// and what each brings to the rounds (its step time and per-fragment push rate). The shard asks
// it the fleet-level questions its round rules need, each over the live workers only (seen within
// the worker timeout and not left: a dead worker's last figures must not hold the fleet back): how
// many there are, the fastest step time (DyLU's v_max), the fleet's push cadence, who is missing
// from a round and what they would bring, and the oldest version of a fragment any of them holds.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/time/time.h"
#include "schema/learner_figures.h"

namespace diloco::server {

// What one worker brings to the rounds of one fragment (RoundNorm::kExpected): the moving
// averages of its undiscounted push weight and of the time between its pushes. A full round is
// one push of every live worker at the fleet's cadence (the lower median of the live workers'
// intervals: robust to one worker's jitter); a worker that pushes a quarter as often (a slow
// one, without DyLU) is expected at a quarter of its weight in each round it misses, not at all
// of it, and one at the fleet's cadence or faster at all of it. How the fleet's pushes are cut
// into rounds does not matter.
struct PushRate {
  double weight = 0;      // EMA of the push weight, staleness not discounted
  double interval_s = 0;  // EMA of the seconds between two of its pushes; 0 = unknown
  absl::Time last = absl::InfinitePast();
};

struct WorkerInfo {
  uint32_t id = 0;
  uint64_t generation = 0;
  std::string rid;          // data connection: pushes, pulls, fragments
  std::string control_rid;  // control connection: heartbeats (may be empty)
  // The newest data connection of this generation a Hello came on (its Header.connection):
  // a Hello from an older one is refused (docs/protocol.md, "A session").
  uint32_t connection = 0;
  // The worker takes a push's Queued answer on its control connection (its control Hello said
  // so): there it does not wait behind the fragment updates streaming on the data connection.
  bool answers_on_control = false;
  absl::Time last_seen = absl::InfinitePast();
  absl::Time last_applied = absl::InfinitePast();  // the newest round that applied its push
  // This generation said Leave (docs/protocol.md, "Leaving"): it is no longer live whatever it
  // sends, and it lowers the quorum; a Hello of a newer generation clears it.
  bool left = false;
  double step_time_us = 0;  // the worker's moving average inner step time, as it last sent it
  absl::flat_hash_map<uint32_t, uint64_t> applied_seq;  // fragment -> last applied seq
  absl::flat_hash_map<uint32_t, PushRate> push_rate;    // fragment -> what it brings a round
  absl::flat_hash_map<uint32_t, uint64_t> holds;        // fragment -> newest version sent it
  // The learner's figures from its last heartbeat that carried them (none from older workers);
  // shown on /metrics, in Stats and by diloco-ctl top, never used by the rounds.
  std::optional<wire::LearnerFiguresFields> figures;
};

// One live learner as a shard's views show it: its last figures and how long ago it was heard
// from, last pushed and last had a push applied (any fragment; nullopt: never).
struct LearnerRow {
  uint32_t id = 0;
  uint64_t generation = 0;
  double step_time_us = 0;
  double seen_age_s = 0;
  std::optional<double> push_age_s;
  std::optional<double> applied_age_s;
  wire::LearnerFiguresFields figures;  // empty when its heartbeats carried none
};

class WorkerTable {
 public:
  using Map = absl::flat_hash_map<uint32_t, std::unique_ptr<WorkerInfo>>;
  // Whether a worker is in a round (a contributor of the fragment's open round).
  using InRound = absl::FunctionRef<bool(uint32_t worker)>;

  explicit WorkerTable(absl::Duration timeout) : timeout_(timeout) {}

  // The worker `id`, added (never seen, generation 0) when unknown.
  WorkerInfo& Add(uint32_t id);
  WorkerInfo* Find(uint32_t id);
  const WorkerInfo* Find(uint32_t id) const;
  WorkerInfo& Get(uint32_t id) { return *workers_.at(id); }  // known to be there
  const Map& all() const { return workers_; }
  size_t size() const { return workers_.size(); }

  bool Live(const WorkerInfo& w, absl::Time now) const {
    return !w.left && now - w.last_seen <= timeout_;
  }
  // Counted in a round's expected weight (as a zero delta when missing): live, or left within
  // the worker timeout (see ExpectedMissingWeight).
  bool Weighs(const WorkerInfo& w, absl::Time now) const { return now - w.last_seen <= timeout_; }
  uint32_t LiveCount(absl::Time now) const;
  // Workers whose current generation has left.
  uint32_t LeftCount() const;
  // The fastest live worker's step time (DyLU's v_max); 0 when none is known.
  double FleetStepTimeUs(absl::Time now) const;
  // The fleet's push cadence in seconds: the lower median of the live workers' moving-average
  // intervals between two pushes of `fragment` (of any fragment: nullopt); 0 when none is known.
  double FleetCadenceS(absl::Time now, std::optional<uint32_t> fragment) const;
  // Live workers not in the round.
  uint32_t LiveMissing(absl::Time now, InRound in_round) const;
  // What the live workers missing from a round of `fragment` usually bring to one (their
  // moving-average push weight, scaled by their push rate over the fleet's cadence, at most 1);
  // a worker that never pushed the fragment brings nothing expected. A worker that left still
  // weighs, as a zero delta, for the worker timeout after it was last seen (its Leave), as a
  // worker that went silent does, though no round waits for it: a fleet that ends together
  // merges its last pushes as one round's worth of work, and the last learner alone does not
  // take whole outer steps on its own last deltas (docs/protocol.md, "Leaving", has the
  // measurements that decided it).
  double ExpectedMissingWeight(absl::Time now, uint32_t fragment, InRound in_round) const;
  // The oldest version of `fragment` a live worker that took it holds; `published` when none.
  uint64_t OldestHeld(absl::Time now, uint32_t fragment, uint64_t published) const;
  // The live workers, by id: one row each, so a departed worker drops out with its liveness.
  std::vector<LearnerRow> Learners(absl::Time now) const;

 private:
  absl::Duration timeout_;
  Map workers_;  // by worker id
};

}  // namespace diloco::server
