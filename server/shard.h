// One outer-optimizer shard: the fragments the plan gives it, their rounds, the workers it has
// seen, and its checkpoints. Transport-free: the server loop hands it each received message and
// sends what it returns, so the whole protocol logic is testable without sockets.
//
// A fragment's life: version 0 (no values) -> InitFragment sets theta(0), version 1 -> each
// closed round applies one Nesterov step on the merged delta and adds 1. A push is acked
// Queued on arrival and Applied when its round's version is published; in per-round durability
// that happens only after the checkpoint holding it is synced, so an Applied ack is never lost.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/clock.h"
#include "common/faults.h"
#include "common/manifest.h"
#include "common/plan.h"
#include "kernels/codec.h"
#include "kernels/optim.h"
#include "schema/train.h"
#include "schema/transport.h"
#include "server/apply_pool.h"
#include "server/buffer_pool.h"
#include "server/checkpoint_writer.h"
#include "server/outer_step.h"
#include "server/round_merge.h"
#include "server/round_policy.h"
#include "server/worker_table.h"
#include "storage/checkpoint_store.h"

namespace diloco::server {

enum class Durability { kPeriodic, kPerRound };

// How a fragment's outer step is taken (OuterMode, RoundStep): server/outer_step.h.
// How a round's pushes are merged (MergeRule): server/round_merge.h.
// What a round's weighted sum of deltas is divided by:
//   kExpected: the round's weight plus the expected weight of every live worker that did not
//     push into it (its moving-average push weight for the fragment, scaled by its push rate
//     over the fleet's, at most 1): an absent worker counts as a zero delta, so a round
//     holding a fraction of the fleet's work moves theta by about that fraction of a full
//     round's delta (default);
//   kArrived: the round's own weight (the weighted mean of what arrived): one lone push then
//     carries a whole step, and rounds of single pushes degenerate into per-push Nesterov.
enum class RoundNorm { kExpected, kArrived };

struct ShardOptions {
  uint32_t shard = 0;
  uint32_t num_shards = 1;
  uint32_t num_fragments = 4;
  // The model's tensors (--model, common/model_source.h); required. model_spec (--model as
  // given) is named in a refusal of another model (common/model_refusal.h).
  Manifest manifest;
  std::string model_spec;
  RoundPolicy round;
  WeightScheme weights = WeightScheme::kTokensSqOverSteps;
  double staleness_alpha = 0;  // discount (1+s)^-alpha, 0 = off
  OuterMode outer_mode = OuterMode::kRounds;
  int dn_period = 4;  // Delayed Nesterov: N arrivals per momentum update
  MergeRule merge = MergeRule::kWeightedMean;
  MergeOrder merge_order = MergeOrder::kArrival;
  RoundNorm norm = RoundNorm::kExpected;
  RoundStep step = RoundStep::kPartial;
  // Test only (common/faults.h; --test_drop_pushes): null unless a test asked for a fault.
  std::shared_ptr<const TestFaults> faults;
  int apply_threads = 0;  // decode/merge threads pinned by fragment; 0 = on the caller's thread
  uint64_t max_staleness = 16;
  // The push guard (server/push_guard.h), per fragment, against the median of its last 32
  // accepted pushes once 8 are known; 0 turns each off, and a cap below 1 is refused.
  // A push claiming more than push_steps_cap x the median steps is weighed as if it held that
  // many steps (its tokens scaled alike); a push whose delta's L2 norm exceeds push_norm_cap x
  // the median norm is scaled down to that norm before it is merged.
  double push_steps_cap = 4;
  double push_norm_cap = 4;
  // Flow control: the most push payload bytes one worker may have held in this shard's open
  // rounds at once (a push is always allowed when none is held); 0 = no byte limit beyond
  // the protocol's one push per (worker, fragment). Announced in Welcome.
  uint64_t worker_credit_bytes = 0;
  // A push train cut by a lost connection (the worker's Hello on a new one) is kept this long,
  // within this many bytes for all of them (the oldest dropped first), and listed in the Welcome,
  // so that the worker sends only its missing chunks (schema/kept_trains.h). 0 bytes: none kept.
  wire::KeepLimits keep_trains{absl::Minutes(5), uint64_t{256} << 20};
  kernels::NesterovParams outer;
  // The step of sparse pushes (OuterChoice, server/outer_step.h): the study's best for top-k
  // pushes with error feedback (benchmarks/quality/RESULTS.md, "The sparse pushes' outer step").
  OuterChoice outer_choice = OuterChoice::kNesterov;
  kernels::NesterovParams sparse_outer{4.0f, 0.0f};
  // How new versions travel to workers: fp32 (this struct's default; diloco-server's is int8)
  // sends every fragment whole; another codec (int8, int4) sends each version as a quantized update
  // from the previous one, with error feedback on the shard, and defines the published values as
  // what the workers reconstruct (server/download_chain.h). Pulls, joins and workers too far behind
  // get whole fragments.
  kernels::Codec download{kernels::CodecKind::kFp32, 256};
  // Updates kept per fragment for workers a few versions behind (a chain is sent only while
  // smaller than the whole fragment: up to 3 int8 or 7 int4 updates).
  uint32_t download_chain = 4;
  // Quantized downloads: a keyframe every this many versions (and each version made while every
  // live worker holds the newest published one): each update is taken from the last keyframe, so a worker
  // several versions behind takes one update (and one per keyframe crossed) instead of one per
  // version (server/download_chain.h). 1: every version is a keyframe.
  uint32_t download_keyframe_every = 8;
  absl::Duration worker_timeout = absl::Seconds(10);
  // Rounds due together close in turn within one Tick until this much time has gone (at least
  // one per call); the rest close on the next call. At 124M parameters in 8 fragments one
  // round took ~0.1 s to close beside a training worker (more with fresh pages), and a loop
  // pass that closed all eight in a row left heartbeats unanswered past --shard_timeout.
  absl::Duration close_budget = absl::Milliseconds(100);
  // A pooled buffer (accumulator, theta copy) no round took for this long is freed.
  absl::Duration buffer_idle = absl::Seconds(30);
  std::string store_path;  // empty: no persistence (tests only)
  // Start from the newest intact checkpoint of a store whose recovery lost committed ones
  // (storage::CheckpointStore::Open) instead of refusing it; logged as the first log line.
  bool accept_store_rollback = false;
  Durability durability = Durability::kPeriodic;
  uint32_t checkpoint_every_rounds = 20;
  absl::Duration checkpoint_interval = absl::Seconds(30);
  absl::Duration checkpoint_retry = absl::Seconds(2);
  // Checkpoints are written by a writer thread while the loop keeps serving (default); false
  // writes them inside Tick/Handle (tests that want synchronous checkpoints).
  bool checkpoint_thread = true;
  // Test hook: runs on the writing thread before each checkpoint write (e.g. blocks on a gate);
  // a non-OK status fails that write without touching the store.
  std::function<absl::Status()> test_before_checkpoint_write;
  // Served in the clear on a non-loopback address (diloco-server --insecure): reported in Stats.
  bool insecure = false;
};

// The number of wire::ErrorCode values (None .. NoCredit).
inline constexpr size_t kErrorCodes = static_cast<size_t>(wire::ErrorCode::MAX) + 1;

// A message to send: routing id, header, payload frames.
struct Outgoing {
  std::string routing_id;
  wire::HeaderFields header;
  std::vector<zmq::message_t> payloads;
  // The payloads' checksums when already known (a published snapshot), else null.
  std::shared_ptr<const std::vector<uint64_t>> checksums;
  // A FragmentUpdate, whole or a chain of quantized updates: the checksum of each fp32 chunk of
  // the values it gives (published_checksums), which the audit log digests.
  std::shared_ptr<const std::vector<uint64_t>> values_checksums;
  // An Applied FragmentUpdate: the steps and tokens the applied push claimed (for the audit
  // log; not sent).
  uint32_t push_steps = 0;
  uint64_t push_tokens = 0;
};

struct ShardCounters {
  uint64_t rounds = 0;
  uint64_t pushes_queued = 0, pushes_duplicate = 0, pushes_stale = 0, pushes_refused = 0;
  uint64_t pushes_no_credit = 0;  // refused as over the worker's credit (NoCredit)
  uint64_t pushes_dropped = 0;    // TestFaults::drop_pushes only
  uint64_t max_held_bytes = 0;    // the most push bytes one worker ever had held at once
  uint64_t messages_bad = 0;
  // Chunks of a train that an earlier refused chunk ended, dropped unanswered (also in
  // messages_bad): each send of a push gets one answer (docs/protocol.md "Trains").
  uint64_t cut_train_chunks = 0;
  // Data Hellos from a connection the worker has since replaced, refused (also in messages_bad
  // as BadIdentity): what a worker left queued on a connection it gave up on, read late.
  uint64_t hellos_superseded = 0;
  // Leave (docs/protocol.md, "Leaving"): workers that left (each (worker, generation) once), a
  // Leave repeated by a worker that had left (answered again, nothing changed), and a Leave
  // refused (a superseded generation, another connection's worker, a payload; also in
  // messages_bad by its reason).
  uint64_t leaves = 0, leaves_repeated = 0, leaves_refused = 0;
  uint64_t bytes_in = 0, bytes_out = 0;
  // FragmentUpdates sent whole (fp32) and as quantized update chains, and their payload bytes.
  uint64_t updates_full = 0, updates_delta = 0;
  uint64_t update_bytes_full = 0, update_bytes_delta = 0;
  uint64_t checkpoints = 0, checkpoint_failures = 0;
  uint64_t last_checkpoint_bytes = 0;
  uint64_t checkpoint_bytes_total = 0;  // tensor bytes of every finished checkpoint
  double checkpoint_ms_total = 0;       // their time inside CheckpointStore::Write
  double last_checkpoint_ms = 0, last_apply_ms = 0;
  uint64_t apply_errors = 0;  // decode failures after validation: never expected
  // The push guard (ShardOptions::push_steps_cap, push_norm_cap): pushes weighed as holding
  // fewer steps than they claimed, pushes whose delta was scaled down to the norm cap.
  uint64_t pushes_weight_capped = 0, pushes_norm_clipped = 0;
  double round_share = 1;  // EMA of a closed round's weight over a full round's (RoundNorm)
  uint64_t staleness_hist[8] = {};  // 0,1,2,3,4-7,8-15,16-31,32+
  uint64_t staleness_sum = 0;       // of every queued push's staleness (the histogram's _sum)
  // Every Error reply by its code (wire::ErrorCode), CURVE identity refusals included.
  std::array<uint64_t, kErrorCodes> refused_by_reason = {};
  // Counted in the server loop, around the Shard: messages refused for a CURVE key bound to
  // another worker id (also in refused_by_reason as BadIdentity), CURVE handshakes the ZAP
  // handler refused (unlisted keys: no message ever arrives), replies to departed workers.
  uint64_t identity_refused = 0, curve_refused = 0, unroutable = 0;
  // The newest checkpoint write's failure ("" once one succeeds): its cause names the errno
  // text and path, e.g. a full disk; and its absl code name ("RESOURCE_EXHAUSTED").
  std::string checkpoint_error, checkpoint_error_code;
};

// The nonzero refusal counts by reason, e.g. with ("\"", "\":", ",") the members of a JSON
// object: "BadIdentity":3,"NoCredit":1.
std::string RefusalsText(const ShardCounters& c, absl::string_view before,
                         absl::string_view between, absl::string_view separator);

class Shard {
 public:
  static absl::StatusOr<std::unique_ptr<Shard>> Create(const ShardOptions& options,
                                                       const Clock* clock);
  ~Shard();

  // Handles one received message (frames after the routing id). Replies go to `out`.
  void Handle(const std::string& routing_id, std::vector<zmq::message_t> frames,
              std::vector<Outgoing>* out);
  // Closes rounds that are due, retries held publications, takes periodic checkpoints.
  void Tick(std::vector<Outgoing>* out);
  // When Tick next has work without new messages.
  absl::Time NextDeadline() const;
  // Writes a checkpoint of the current state now (shutdown): waits for the write in flight,
  // then writes and syncs one more. Blocks.
  absl::Status CheckpointNow();
  // Blocks until the checkpoint write in flight (if any) is done; the next Tick takes its
  // result and publishes what it made durable (tests; the loop never blocks on it).
  void AwaitCheckpoint();
  // Readable while a finished checkpoint write waits for Tick (poll it beside the socket);
  // -1 without a store or writer thread.
  int checkpoint_wake_fd() const;
  bool checkpoint_in_flight() const { return writer_ && writer_->busy(); }

  // Introspection (tests, stats, ctl).
  uint64_t incarnation() const { return incarnation_; }
  uint64_t plan_fingerprint() const { return plan_.fingerprint(); }
  const Plan& plan() const { return plan_; }
  const std::vector<uint32_t>& owned() const { return owned_; }
  uint64_t published_version(uint32_t fragment) const;
  // The checksum of each fp32 chunk of a fragment's published values, as a FragmentUpdate sends
  // them (null before theta(0) is published).
  std::shared_ptr<const std::vector<uint64_t>> published_checksums(uint32_t fragment) const;
  std::vector<float> params(uint32_t fragment) const;
  const ShardCounters& counters() const { return counters_; }
  void CountBytesOut(uint64_t n) { counters_.bytes_out += n; }
  void CountUnroutable() { ++counters_.unroutable; }
  // The ZAP handler's running total of refused handshakes (wire::ZapHandler::refused).
  void SetCurveRefused(uint64_t total) { counters_.curve_refused = total; }
  uint32_t shard_index() const { return opt_.shard; }
  uint32_t live_workers() const;
  // The live workers and their last figures (server/worker_table.h), for /metrics and Stats.
  std::vector<LearnerRow> learners() const;
  std::string StatsJson() const;

  // An Error reply to a message refused before it reached the shard (the server loop's CURVE
  // key binding), counted and logged like the shard's own refusals.
  void RefuseUnbound(const std::string& rid, const absl::Status& s, const wire::MessageIds& claimed,
                     std::vector<Outgoing>* out);
  // Lines for the operator's log since the last call: refusals with their reason, and pushes the
  // guard capped or clipped, at most one per reason every kRefusalLogInterval, with how many of
  // that reason went unlogged between.
  std::vector<std::string> TakeLogLines() { return std::exchange(log_lines_, {}); }
  static constexpr absl::Duration kRefusalLogInterval = absl::Seconds(10);

 private:
  struct FragmentState;
  struct RoundLane;
  struct HeldPush;
  Shard(const ShardOptions& o, const Clock* clock, Plan plan);

  // Opens the store (vetted, storage::CheckpointStore::Open) and loads its newest checkpoint.
  absl::Status Recover(const storage::StoreIdentity& identity);
  // An Error reply naming the refused message's worker, fragment and seq (from `h` if known).
  using RefusedIds = wire::MessageIds;
  void Refuse(const std::string& rid, const absl::Status& s, const wire::Header* h,
              std::vector<Outgoing>* out);
  void Refuse(const std::string& rid, const absl::Status& s, RefusedIds ids,
              std::vector<Outgoing>* out);
  // Which connections a message may arrive on: any (Hello), a worker's bound data connection
  // (pushes, pulls, uploads), or either of its bound connections (heartbeats).
  enum class Via { kAnyConnection, kData, kDataOrControl };
  absl::Status CheckCommon(const std::string& rid, const wire::Header& h, Via via);
  // The owned fragment `h` names, or nullptr after answering UnknownFragment.
  FragmentState* OwnedFragment(const std::string& rid, const wire::Header& h,
                               std::vector<Outgoing>* out);
  // Drops a connection's binding and the bound worker's reference to it.
  void Unbind(const std::string& rid);
  void OnHello(const std::string& rid, const wire::Message& m, std::vector<Outgoing>* out);
  void OnInit(const std::string& rid, const wire::Message& m, std::vector<Outgoing>* out);
  void OnPush(const std::string& rid, wire::Message m, std::vector<Outgoing>* out);
  // OuterChoice::kAuto. With rounds: logs a fragment's first top-k push (every push steps as
  // its codec asks, LaneOf). Per arrival: the fragment's step, chosen by its first push's codec;
  // a push of the other kind is refused (BadCodec) naming both flags.
  absl::Status PickOuterStep(FragmentState& f, const kernels::Codec& codec);
  // The lane of f's round a push of `codec` merges into (FragmentState::dense / sparse).
  static RoundLane& LaneOf(FragmentState& f, const kernels::Codec& codec);
  const std::string& QueuedAnswerRid(const WorkerInfo& w, const std::string& data_rid) const;
  void OnPull(const std::string& rid, const wire::Message& m, std::vector<Outgoing>* out);
  void OnHeartbeat(const std::string& rid, const wire::Message& m, std::vector<Outgoing>* out);
  // A worker that is done: its generation leaves the live set, the quorum and the rounds at
  // once, instead of after the worker timeout.
  void OnLeave(const std::string& rid, const wire::Message& m, std::vector<Outgoing>* out);
  // The round rules with the quorum lowered for the workers that left (QuorumAfterLeaves).
  RoundPolicy Round() const;
  void CloseRound(FragmentState& f);
  // Hands one push of f's open round to its merge: decoded on the fragment's apply thread.
  void MergePush(FragmentState& f, const HeldPush& p);
  // Hands f's held pushes (MergeOrder::kWorker) to its merge, in worker order.
  void MergeHeld(FragmentState& f);
  void Publish(FragmentState& f, std::vector<Outgoing>* out);
  // One lane's outer step on its merged delta (lane.acc()), of `share` of a full round. A theta
  // the published snapshot (or a send) still holds is not copied first: the step writes the new
  // theta into the accumulator's buffer, which becomes theta, so a burst of rounds closing
  // together needs one buffer per open round and lane and no more.
  void StepRound(FragmentState& f, RoundLane& lane, double share);
  // Before theta changes in place (Delayed Nesterov): a theta the published snapshot (or a
  // send) still holds is copied to a pooled buffer first, and the copy becomes the live theta.
  void MakeThetaWritable(FragmentState& f);
  // May f's version go out now? Without a store always; theta(0) only once durable; in
  // per-round mode only the durable version.
  bool Publishable(const FragmentState& f) const;
  // Publishes every publishable fragment and answers the Init pushes it held.
  void PublishReady(std::vector<Outgoing>* out);
  // Starts a checkpoint when one is due and none is in flight (inline: also finishes it).
  void MaybeStartCheckpoint(absl::Time now);
  // Hands the current state to the writer: fragments whose data it borrows are frozen.
  void StartCheckpoint(bool sync);
  void FinishCheckpoint(const CheckpointWriter::Result& r);
  // A FragmentUpdate of f's published version for a worker that holds version `base` (0: none
  // known) and `keyframe` (0: unsaid, an older worker): the quantized updates from `base`, or
  // else from `keyframe`, when f keeps them and they are smaller, else the whole fragment (whose
  // version then becomes a keyframe: server/download_chain.h). Records that `worker` now holds
  // the published version.
  void FillUpdate(FragmentState& f, uint32_t worker, uint64_t base, uint64_t keyframe, Outgoing* o);
  // Quantized downloads: the step moved theta from `previous`; theta becomes the published
  // values P_v and the update to them is kept (server/download_chain.h).
  void QuantizeDownload(FragmentState& f, std::span<const float> previous);
  // Forgets the updates of f that no live worker can still need.
  void TrimDownloads(FragmentState& f);
  // Bytes the quantized downloads hold (residuals and kept updates) over the owned fragments.
  uint64_t DownloadBytes() const;
  // The pool keeps what the round buffers' share of the memory bound leaves beside the
  // download state (server/buffer_pool.h).
  void BudgetPool();
  // Payload bytes of `worker`'s pushes (this generation) waiting in open rounds.
  uint64_t HeldBytes(uint32_t worker, uint64_t generation) const;
  absl::Duration Grace() const;
  wire::HeaderFields Reply(wire::MsgType type) const;

  // A payload train that received nothing for this long lost its sender: dropped.
  static constexpr absl::Duration kTrainIdle = absl::Minutes(5);
  ShardOptions opt_;
  const Clock* clock_;
  Plan plan_;
  uint64_t model_fingerprint_ = 0;
  uint64_t incarnation_ = 0;
  std::vector<uint32_t> owned_;
  absl::flat_hash_map<uint32_t, std::unique_ptr<FragmentState>> fragments_;
  // Accumulators of open rounds and thetas they replaced, kept for reuse while rounds use them
  // (at most one per owned fragment, plus one).
  BufferPool pool_{0, absl::ZeroDuration()};
  // StepRound: a chunk of the delta; QuantizeDownload: two chunks. Allocated once, shared.
  std::vector<float> step_scratch_;
  std::vector<std::string> log_lines_;
  uint64_t failures_in_a_row_ = 0;  // checkpoint writes failed since the last that succeeded
  struct LogThrottle {
    absl::Time last = absl::InfinitePast();
    uint64_t unlogged = 0;
  };
  // Adds `line` to log_lines_ unless `throttle` let one through within kRefusalLogInterval:
  // then it only counts it, and the next line it lets through says how many it held back.
  void LogThrottled(LogThrottle& throttle, std::string line);
  // The push guard's weight caps and norm clips (drained from the apply thread at CloseRound),
  // counted and logged.
  void CountWeightCap(const wire::Header& h, const FragmentState& f, double steps, double limit);
  void CountNormClips(FragmentState& f);
  std::array<LogThrottle, kErrorCodes> refusal_log_;
  LogThrottle weight_cap_log_, norm_clip_log_;
  size_t close_cursor_ = 0;  // where the next Tick starts closing due rounds (owned_ index)
  std::vector<size_t> due_;  // Tick's rounds to close (owned_ indexes), kept for its capacity
  uint64_t owned_params_ = 0;
  uint64_t round_buffer_bytes_ =
      0;  // the memory bound's share for round buffers: 4 (F + 1) / F B/param
  WorkerTable workers_;
  struct Binding {
    uint32_t worker = 0;
    bool control = false;  // the worker's heartbeat-only connection
  };
  absl::flat_hash_map<std::string, Binding> bound_;  // routing id -> worker; two per worker at most
  wire::TrainAssembler trains_;                      // chunks of payload trains, per connection
  // Per connection: the train a refused chunk ended, whose later chunks (the same ids, the next
  // index each, up to num_chunks) are dropped unanswered: the refusal of the chunk that ended it
  // is the train's one answer. Forgotten at the connection's next first chunk or whole message,
  // or once the train's last chunk passed. `any`: the refused chunk's header named nothing (it
  // failed its checksum), so the next later chunk is taken as the cut train's, whatever it names
  // (a sender does not interleave trains on a connection), and sets the ids and place.
  struct CutTrain {
    bool any = false;
    wire::MessageIds ids;
    uint32_t next = 0, num_chunks = 0;  // the index the train's next chunk has; its length
    absl::Time at;
  };
  absl::flat_hash_map<std::string, CutTrain> cut_trains_;
  // Notes that the chunk `index` of `num_chunks` named `ids` ended its train on `rid`.
  void CutTrainAt(const std::string& rid, const wire::MessageIds& ids, uint32_t index,
                  uint32_t num_chunks);
  // Whether a train chunk the assembler refused continues the cut train of `rid` (and, if so,
  // moves the cut train's place past it).
  bool ContinuesCutTrain(const std::string& rid, const wire::MessageIds& ids, uint32_t index,
                         uint32_t num_chunks);
  std::unique_ptr<storage::CheckpointStore> store_;
  std::unique_ptr<CheckpointWriter> writer_;  // after store_ and fragments_: joined first
  struct InFlight {
    uint64_t rounds = 0;
    std::vector<std::pair<uint32_t, uint64_t>> versions;  // fragment -> version in the job
  } in_flight_;
  std::unique_ptr<ApplyPool> apply_;  // declared after fragments_: joined before they go
  uint64_t checkpoint_id_ = 0;
  uint64_t rounds_at_checkpoint_ = 0;
  absl::Time last_checkpoint_time_;
  absl::Time next_checkpoint_retry_ = absl::InfinitePast();
  bool dirty_ = false;
  RoundTimings timings_;
  ShardCounters counters_;
};

}  // namespace diloco::server
