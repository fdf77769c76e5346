// What the sync client is told (SyncOptions) and its one check (Validate), what it counts
// (SyncStats) and the events it reports one by one (SyncEvent): the vocabulary shared by the
// client (worker/sync_client.h), its per-shard sessions (worker/shard_session.h) and the state
// their threads share (worker/sync_shared.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/faults.h"
#include "kernels/codec_kind.h"

namespace diloco::worker {

struct SyncOptions {
  std::vector<std::string> servers;  // endpoint of shard i at index i
  uint32_t worker_id = 0;
  uint64_t generation = 0;  // 0: derived from the clock at start
  uint32_t num_fragments = 4;
  kernels::Codec codec;
  uint32_t inner_steps = 50;  // H
  // --codec=auto / --inner_steps=auto (worker/link_plan.h): the push codec among auto_codecs
  // (finest first; `codec` is then the first) and H from inner_steps up to inner_steps_max,
  // chosen from the link's measured rates and the step time, again once a round.
  bool auto_codec = false, auto_inner_steps = false;
  std::vector<kernels::Codec> auto_codecs;
  uint32_t inner_steps_max = 0;
  double link_margin = 1.5;  // a round's transfers take at most 1 / margin of its steps' time
  // Adoption of a fragment's new global values (the join always takes them as they are):
  //   kKeep: local = global + (local - local_at_push), the inner steps taken since the push
  //          survive (default; with replace a fast worker beside a slow one loses ~45% of its
  //          steps, docs/worker.md);
  //   kLerp: local = global + adopt_alpha * (local - global); alpha 0 replaces.
  enum class Adopt { kKeep, kLerp };
  Adopt adopt = Adopt::kKeep;
  float adopt_alpha = 0.0f;
  // kKeep, where training goes on while a push is out (asynchronous, or lockstep with an
  // overlap): at each push the local values move on to anchor - extrapolate x delta, so the
  // steps taken until the answer start nearer where the fleet's outer step will land, and the
  // adoption takes extrapolate x delta out again (worker/training_sync.h, "Extrapolation").
  // 1 turns it off; see PushExtrapolation for where it applies.
  float extrapolate = 1.25f;
  // kKeep, asynchronous: a push's Applied answer says how long the shard held it before its round
  // closed (held_us), and the fragment's next push comes that many of this worker's steps later
  // than H (at most H / 2 later), so that the fleet's pushes of a round leave together instead of
  // waiting on the last one at the phases the workers happened to start with (worker/
  // training_sync.h, "Alignment"). Off only to measure what it is worth.
  bool align_pushes = true;
  // The most local steps a fragment carries into a push, as a multiple of inner_steps (H): a
  // push answered late leaves every step taken since in the local model, and one push holding
  // them all would outweigh the fleet's round with a drift taken on a long-gone model. Past
  // the bound the fragment re-anchors on the last global values it adopted (worker/
  // training_sync.h; SyncStats::reanchors).
  uint32_t carry_max = 8;
  // Deterministic mode: AfterStep returns only once the pushes it queued are answered and their
  // results adopted (or lockstep_timeout passed), so a run is a fixed sequence of steps and
  // rounds whatever the timing (tests; with quorum = all workers, synchronous DiLoCo).
  bool lockstep = false;
  // Lockstep only: a push is awaited this many steps after it is queued, its answer adopted
  // then (never earlier), so that the overlap of training with a round is fixed and a run
  // still repeats exactly: what an asynchronous worker's overlap costs, without its timing.
  uint32_t lockstep_overlap = 0;
  // Error feedback: a push's quantisation error goes into the next push. Off only to measure
  // what it is worth (the convergence study).
  bool error_feedback = true;
  // What of the residual each push keeps (worker/push_codec.h, EncodePush): e = ef_decay x e +
  // delta, in (0, 1]; 1 keeps it all. 0 (the default): per codec (EfDecayFor: 0.8 for top-k
  // pushes, as SparseLoCo decays its residual; 1 for the others).
  float ef_decay = 0.0f;
  absl::Duration lockstep_timeout = absl::Seconds(60);
  // Polled while a lockstep step waits for its answers (every 20 ms): true ends the wait at
  // once, so that a signal stops a worker whose round cannot close (a fleet member down) now,
  // not after lockstep_timeout. Empty: never.
  std::function<bool()> interrupted;
  bool dylu = false;   // Dynamic Local Updates: H_w = H * v_w / v_fleet_max
  bool stream = true;  // stagger fragments' pushes over the H steps
  absl::Duration heartbeat = absl::Milliseconds(500);
  // Heartbeats on a second connection per shard, so that on a slow link they never wait
  // behind a fragment (which would read as a dead shard and restart the transfer). Off only to
  // show that failure (tests/worker).
  bool control_channel = true;
  absl::Duration shard_timeout = absl::Seconds(3);  // silence before reconnecting
  // Retries on a live connection are a safety net only (a reconnect re-sends everything at
  // once): each unanswered push or join is re-sent after resend_after / join_retry, then at
  // doubling intervals up to retry_max, so that on a slow link where a fragment takes longer
  // than the first interval to cross, retries do not pile copies of it onto the link.
  absl::Duration resend_after = absl::Seconds(5);  // no ack: send the push again
  absl::Duration backoff_max = absl::Seconds(4);
  // CURVE, all three or none (Z85 text, see schema/curve.h): the shards' public key and this
  // worker's key pair, whose public half the shards list for this worker_id.
  std::string curve_server_key, curve_public_key, curve_secret_key;
  absl::Duration join_retry = absl::Seconds(1);  // re-ask for an unjoined fragment
  absl::Duration retry_max = absl::Seconds(60);
  // Neither comes before the bytes ahead of its answer could have crossed the link at its
  // measured rate (worker/link_pace.h); before a first measurement the link is assumed this
  // slow (bytes/s; 1 Mbit/s, below any link the system is meant for), so a slow link is not
  // filled with copies of what is still crossing it.
  double link_rate_floor = 125e3;
  // DyLU needs the fleet's step time, which the shards send in Welcome (and, once they do, in
  // Heartbeat replies); with dylu on, a Hello is repeated this often to refresh it.
  absl::Duration fleet_refresh = absl::Seconds(1);
  size_t max_events = 4096;  // TakeEvents() backlog; older events are dropped beyond it
  // Test only (common/faults.h): null unless a test asks for a fault. Each shard session and
  // each shard link spends its own copy of the counts.
  std::shared_ptr<const TestFaults> faults;
};

struct SyncStats {
  uint64_t pushes = 0, applied = 0, resends = 0, adoptions = 0, stale = 0, duplicates = 0;
  uint64_t refused = 0, errors = 0;
  uint64_t bytes_sent = 0, bytes_received = 0;
  uint64_t reconnects = 0, shard_restarts = 0;
  // Fragments whose local work passed carry_max x H and was dropped for the global values,
  // and the steps so dropped.
  uint64_t reanchors = 0, reanchored_steps = 0;
  // Pushes due later than H to align with the fleet's (SyncOptions::align_pushes), and the
  // steps they waited in all.
  uint64_t aligned_pushes = 0, aligned_steps = 0;
  uint64_t join_asks = 0;  // fragments asked for while joining (the first asks and any re-asks)
  // A joined fragment's values asked for again on a live connection, the answer overdue.
  uint64_t reasks = 0;
  // theta(0) uploads sent on from the chunks a shard held (a cut upload resumed), and the
  // payload bytes of theta(0) sent (of a resumed upload, the rest only).
  uint64_t init_resumed = 0, init_bytes_sent = 0;
  uint32_t joined = 0;        // fragments joined (pulled once)
  uint32_t unacked = 0;       // pushes waiting for their answer
  double mean_staleness = 0;  // EMA of rounds merged between a push's base and its round
  uint64_t max_staleness = 0;
  uint32_t inner_steps_now = 0;  // current H_w
  kernels::Codec codec_now;      // the codec of the pushes made now
  // The link as the sync client measures it (worker/link_meter.h; 0: not yet) and what a round
  // of the current choice moves across it (worker/link_plan.h), in seconds.
  double up_bytes_per_s = 0, down_bytes_per_s = 0, down_bytes_per_param = 0;
  double round_need_s = 0, round_budget_s = 0;
  uint64_t link_choices = 0;      // times --codec=auto / --inner_steps=auto changed the choice
  double step_time_us = 0;        // this worker's EMA inner step time
  double fleet_step_time_us = 0;  // fastest worker's, as the shards last said (0: unknown)
  double after_step_us = 0;       // EMA cost of AfterStep on the training thread
  double after_step_max_us = 0;
  std::vector<uint64_t> versions;  // adopted version per fragment
  // Per fragment: the times the client wrote its local values (adoptions, re-anchors, the
  // extrapolation at a push and its undoing), so that a caller mirroring them knows which to
  // copy back (python/learner.cc).
  std::vector<uint64_t> local_writes;
  // Downloads adopted: whole fp32 fragments, and quantized update chains reconstructed on the
  // last adopted values (docs/protocol.md, "Quantized downloads"). A reconstruction whose
  // checksum differs from the shard's (never expected) is counted and the fragment pulled whole.
  uint64_t updates_full = 0, updates_delta = 0, download_mismatches = 0;
  // From a push's send to the adoption of the values that answer it, on the training thread:
  // the moving average, the most, and the latest (up to kRecentLatencies, oldest first).
  double push_to_adopt_ms = 0, push_to_adopt_max_ms = 0;
  std::vector<double> recent_push_to_adopt_ms;
  static constexpr size_t kRecentLatencies = 256;
};

// Things machines want to follow one by one (worker_main writes them as JSON lines).
struct SyncEvent {
  enum Kind {
    kPush,
    kApplied,
    kDuplicate,
    kStale,
    kRefused,
    kShardRestart,
    kReanchor,
    kLinkChoice
  };
  Kind kind = kPush;
  uint32_t shard = 0, fragment = 0;
  uint64_t seq = 0, base_version = 0, version = 0;
  std::string detail;  // kRefused: the shard's message; kLinkChoice: the choice and why
  // kPush: the steps and tokens the push claims; kReanchor: those dropped; kLinkChoice: the
  // chosen H in steps.
  uint64_t steps = 0, tokens = 0;
  kernels::Codec codec;  // kPush, kLinkChoice: the push codec
};
const char* SyncEventName(SyncEvent::Kind k);

// How a refusal names an option: as diloco-worker's flag ("--carry_max") or as the Python
// learner's keyword ("carry_max").
enum class OptionNames { kFlags, kKeywords };

// The one check of a SyncOptions, made by diloco-worker's flags (worker/worker_flags.cc), the
// Python learner (python/learner_options.cc) and SyncClient::Create: OK, or InvalidArgument naming
// the first bad option and its value. `servers` is SyncClient::Create's to check; the faults are a
// test's own.
absl::Status Validate(const SyncOptions& o, OptionNames names = OptionNames::kFlags);

// The extrapolation a worker applies at a push: o.extrapolate where adoption keeps the local
// work (kKeep) and a push's answer may come while training goes on; 1 (none) with kLerp, and in
// lockstep without an overlap, where the answer is adopted before the next step and moving the
// local values on first would only change their rounding.
float PushExtrapolation(const SyncOptions& o);

// Whether a fragment's next push waits for the hold of its last one (align_pushes): only
// asynchronously with kKeep. Lockstep workers push at the same step counts already, and kLerp
// counts a fragment's steps from its adoption, so its next push already follows the round.
bool PushAlignment(const SyncOptions& o);

}  // namespace diloco::worker
