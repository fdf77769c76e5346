// The Shard's private parts that its translation units share: a fragment's state and the small
// helpers more than one of them uses. The class is split by job:
//   shard.cc             creation, dispatch, the checks every message passes, refusals
//   shard_hello.cc       identity: Hello, Heartbeat, Leave
//   shard_push.cc        push intake: exactly-once, credit, staleness, the weight cap
//   shard_pull.cc        a fragment's whole values: InitFragment and Pull
//   shard_rounds.cc      rounds: closing, the outer step, quantized downloads, publication
//   shard_checkpoint.cc  recovery from the store, checkpoint scheduling and results
//   shard_stats.cc       introspection and the Stats JSON
// Not for users of the Shard (server/shard.h is its interface).
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "common/ema.h"
#include "server/download_chain.h"
#include "server/outer_step.h"
#include "server/push_guard.h"
#include "server/shard.h"

namespace diloco::server {

// The protocol names the shard's files use throughout.
using wire::AckStatus;
using wire::ErrorCode;
using wire::HeaderFields;
using wire::MsgType;
using wire::WireError;

// The shard's running figures (push weights and intervals, time to quorum, inner steps) take
// each new sample with this weight (common/ema.h).
inline constexpr double kEmaWeight = 0.2;

// The checksum of each fp32 chunk frame of a snapshot, as FillUpdate will cut it.
std::shared_ptr<const std::vector<uint64_t>> SnapshotChecksums(const wire::Bytes& b);

// Whether a worker is among the contributors of fragment state f's open round.
template <typename FragmentState>
auto InRound(const FragmentState& f) {
  return [&f](uint32_t worker) {
    for (const auto& c : f.contributors)
      if (c.worker == worker) return true;
    return false;
  };
}

// A push taken into a fragment's open round, not yet handed to its merge (MergeOrder::kWorker
// holds every push of the round until it closes; kArrival hands each over at once).
struct Shard::HeldPush {
  std::shared_ptr<wire::Message> msg;  // the payload frames, moved from the socket, uncopied
  kernels::Codec codec;
  uint32_t worker = 0;
  uint64_t generation = 0, seq = 0;
  double weight = 0;  // PushWeight, after the weight cap
};

// One kind of push's part of a fragment's open round (FragmentState::dense / sparse).
struct Shard::RoundLane {
  std::unique_ptr<RoundMerge> merge;  // how the lane's pushes become its delta (into acc)
  std::unique_ptr<OuterStep> outer;   // how that delta moves theta (and the momentum)
  // The lane's accumulator, from the shard's pool while it has pushes this round (else null).
  std::shared_ptr<wire::Bytes> acc_buf;
  std::span<float> acc() const { return Floats(*acc_buf); }
  double weight_sum = 0;  // merged pushes' weights, relative to the round's first
  uint32_t merged = 0;    // pushes merged into acc this round
};

struct Shard::FragmentState {
  const Fragment* spec = nullptr;
  uint64_t version = 0;    // applied
  uint64_t published = 0;  // visible to workers (== version unless a checkpoint is pending)
  uint64_t durable = 0;    // the version the store's newest checkpoint holds
  // Its theta and momentum are borrowed by the checkpoint in flight: read-only until the write
  // is done (its next round closes after it; pushes keep merging into acc meanwhile).
  bool writing = false;
  std::vector<Outgoing> init_acks;  // Initialized answers held until theta(0) is durable
  // The live theta, in a shared buffer: once published it is also `snapshot` (sends read it
  // zero-copy), and the next round that changes it writes a new buffer (StepRound).
  std::shared_ptr<wire::Bytes> theta_buf;
  std::vector<float> momentum;
  std::span<float> theta() const { return Floats(*theta_buf); }
  // Where a round's pushes merge and how their delta steps: every push in `dense`, except that
  // under OuterChoice::kAuto with rounds a top-k push goes to `sparse` (Shard::LaneOf), whose
  // step takes no momentum and follows the dense lane's in the same round (Shard::CloseRound).
  RoundLane dense, sparse;
  double weight_ref = 0;  // the weight of the round's first merged push, in either lane
  uint32_t merged() const { return dense.merged + sparse.merged; }
  double weight_sum() const { return dense.weight_sum + sparse.weight_sum; }
  std::vector<HeldPush> held;  // MergeOrder::kWorker: the round's pushes, unmerged
  OpenRound round;
  struct Contribution {
    std::string rid;
    uint32_t worker = 0;
    uint64_t generation = 0, seq = 0;
    uint64_t bytes = 0;   // payload bytes of the push
    uint64_t base = 0;    // the version the push was trained from: what the worker holds
    uint64_t tokens = 0;  // what the push claimed (the audit log's)
    uint32_t steps = 0;
    absl::Time arrived;     // the push was taken (its Queued answer): the Applied one's held_us
    uint64_t keyframe = 0;  // the keyframe the worker holds (0: unsaid, an older worker)
  };
  std::vector<Contribution> contributors;       // in the open round
  std::vector<Contribution> unacked;            // applied, Applied ack held until published
  std::shared_ptr<const wire::Bytes> snapshot;  // published theta, shared by every send
  std::shared_ptr<const std::vector<uint64_t>> snapshot_sums;  // per chunk, hashed once
  std::unique_ptr<DownloadChain> downloads;                    // quantized downloads only
  // OuterChoice::kAuto with a step per arrival (Delayed Nesterov, one lane): whether the dense
  // lane's step is the sparse pushes', once a push has chosen it (not checkpointed: a restarted
  // shard's first push chooses again).
  std::optional<bool> sparse_step;
  bool topk_logged = false;  // OuterChoice::kAuto with rounds: its first top-k push was logged
  // The push guard (server/push_guard.h): the steps cap on the I/O thread (OnPush), the norm
  // cap on the fragment's apply thread.
  MedianCap steps_cap;
  MedianCap norm_cap;
  // Written by the fragment's apply thread, read after ApplyPool::Wait.
  std::atomic<int64_t> last_apply_ns{0};
  std::atomic<uint64_t> apply_errors{0};
  struct NormClip {
    uint32_t worker = 0;
    uint64_t seq = 0;
    double norm = 0, limit = 0;  // the delta's norm as sent, what it was scaled down to
  };
  // Pushes the norm cap clipped since the last CloseRound (appended by the apply thread, drained
  // after ApplyPool::Wait, which orders the two).
  std::vector<NormClip> norm_clips;
};

}  // namespace diloco::server
