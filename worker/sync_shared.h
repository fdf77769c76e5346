// What the sync client's two threads hand each other, and the one lock that guards it.
//
// The training thread (worker/sync_client.cc) queues due pushes, theta(0) uploads and pulls of
// whole fragments; the I/O thread takes them in one swap per pass of its loop. The I/O thread's
// shard sessions (worker/shard_session.h) hand back arrivals (fragments to adopt, pushes that
// ended unapplied, resets) and count into the stats and the event log. Everything here is
// guarded by `mu_` and checked by clang's thread-safety analysis; nothing else is shared but
// the outstanding pushes' delta buffers (worker/delta_pool.h), whose hand-off the push queue
// orders (PushJob::delta) and whose return the arrival that ends the push does.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "schema/transport.h"
#include "worker/link_meter.h"
#include "worker/link_plan.h"
#include "worker/push_codec.h"
#include "worker/sync_options.h"

namespace diloco::worker {

// A push: metadata from the training thread, encoded and kept by the fragment's shard session
// until answered. The delta it carries stays in the training thread's buffer for the fragment,
// which the training thread does not write again until the push has ended (FragmentSync::
// outstanding): the queue's lock orders the write before the session's reads.
struct PushJob {
  uint32_t fragment = 0;
  uint64_t seq = 0, base_version = 0, tokens = 0;
  uint64_t keyframe_version = 0;  // the keyframe the worker holds (docs/protocol.md, "Keyframes")
  uint32_t steps = 0;
  kernels::Codec codec;  // chosen by the training thread (SyncOptions::codec or auto)
  // The fp32 delta, the training thread's buffer (worker/delta_pool.h): the session reads it to
  // encode the push and to undo its error feedback when it ends unapplied, never after the
  // arrival that ends the push.
  std::span<const float> delta;
  EncodedPush push;        // the payload, set by the session (worker/push_codec.h)
  bool in_flight = false;  // sent on this connection and counted against the shard's credit
  // The shard answered Queued on this connection: it holds the push, and a new incarnation
  // (a Welcome from a restarted shard) is what would lose it, so only retry_max's last-resort
  // resend remains, or the one that follows answer_due.
  bool queued = false;
  uint64_t queued_version = 0;  // the shard's published version its Queued answer named
  // When the shard's versions first showed the round that holds the push published (so its
  // Applied answer sent); InfiniteFuture until then (ShardSession::AnswerDue).
  absl::Time answer_due = absl::InfiniteFuture();
  absl::Time sent = absl::InfinitePast();
  // Push bytes ahead of this one on the data connection when it was last sent, its own
  // included: the upload its Queued answer waits behind.
  uint64_t bytes_ahead = 0;
  uint64_t sent_bytes = 0;  // of its last send: the whole push, or a resumed train's rest
  absl::Time made = absl::InfinitePast();        // when the training thread took the delta
  absl::Time not_before = absl::InfinitePast();  // after a NoCredit refusal
  absl::Duration resend_interval;                // doubles with each resend (retry_max)
  bool resent_corrupt = false;  // refused BadChecksum once and sent again; a second is final
};

// What the I/O thread hands back to the training thread.
struct Arrival {
  enum Kind {
    kUpdate,    // a FragmentUpdate to adopt (worker/fragment_update.h)
    kDone,      // this worker's push ended not applied (Stale, refused, lost by a restarted shard)
    kReset,     // the shard restarted: forget the adopted version, take what it sends next
    kNeedInit,  // the shard has no values for the fragment: send it ours
  } kind = kUpdate;
  uint32_t fragment = 0;
  uint64_t version = 0;
  bool answers_push = false;  // the Applied update of this worker's outstanding push
  std::optional<wire::Message> message;
  absl::Time pushed = absl::InfinitePast();  // answers_push: when the push was made
};

class SyncShared {
 public:
  SyncShared(uint32_t num_fragments, uint32_t num_shards, size_t max_events);

  // ---- Training thread to I/O thread ----
  // `jobs` are due; each counts as pending until its session ends it (PushEnded).
  void QueuePushes(std::vector<PushJob> jobs);
  void QueueInit(uint32_t fragment, std::shared_ptr<const wire::Bytes> values);
  // A fragment to pull whole; `answers_push`: the pull's answer answers the outstanding push.
  void QueuePull(uint32_t fragment, bool answers_push);
  struct Outbox {
    std::deque<PushJob> pushes;
    std::deque<std::pair<uint32_t, std::shared_ptr<const wire::Bytes>>> inits;
    std::deque<std::pair<uint32_t, bool>> pulls;
  };
  Outbox TakeOutbox();

  // ---- I/O thread to training thread ----
  void Deliver(Arrival a);
  void PushEnded();  // a push got its final answer (or was given up)
  // A refusal no retry can change; the first one is kept and reported by Join.
  void Fatal(std::string why);

  // ---- Training thread ----
  // What has arrived; waits up to `wait` for something first if nothing has.
  std::deque<Arrival> TakeArrivals(absl::Duration wait = absl::ZeroDuration());
  std::string fatal() const;
  bool draining() const;
  // Drain: from now on no push is taken. Waits up to `wait` while pushes are pending, and
  // returns what arrived and the pushes still pending before and after the wait.
  struct Drained {
    std::deque<Arrival> arrivals;
    uint64_t pending_before = 0, pending = 0;
  };
  Drained AwaitDrain(absl::Duration wait);

  // ---- I/O thread: what crossed the link (worker/link_meter.h) ----
  // A push of `bytes` from its send to its Queued answer.
  void NoteUpload(absl::Time start, absl::Time end, uint64_t bytes);
  // An update of `bytes` for `numel` parameters arrived; `start`, when known, is when it left
  // the shard (in this worker's clock), so that its crossing is timed.
  void NoteDownload(std::optional<absl::Time> start, absl::Time end, uint64_t bytes,
                    uint64_t numel);

  // ---- Training thread ----
  // The measured rates and update size (the step time is the caller's).
  LinkMeasure link() const;

  // ---- Either thread ----
  void Add(uint64_t SyncStats::*counter, uint64_t n = 1);
  // Several fields changed together, under the lock.
  void Update(absl::FunctionRef<void(SyncStats&)> change);
  void Event(SyncEvent e);
  std::vector<SyncEvent> TakeEvents();
  SyncStats stats() const;

  // This worker's inner step time (the training thread's EMA; every header carries it) and the
  // fastest worker's, as the shards last said (the smallest figure of any shard; 0: unknown).
  void set_step_time_us(uint64_t us) { step_time_us_ = us; }
  uint64_t step_time_us() const { return step_time_us_.load(); }
  void SetFleetStepTime(uint32_t shard, uint64_t us);
  uint64_t fleet_step_time_us() const { return fleet_step_time_us_.load(); }

  // The training loop's progress (step, loss, tokens/s, utilization, device), as it last said;
  // heartbeats carry it with the sync figures of stats() and this host's name (Figures()).
  void SetProgress(const wire::LearnerFiguresFields& progress);
  wire::LearnerFiguresFields Figures() const;

 private:
  mutable Mutex mu_;
  CondVar cv_;  // signalled with arrivals, ended pushes and a fatal refusal
  std::deque<PushJob> pushes_ ABSL_GUARDED_BY(mu_);
  std::deque<std::pair<uint32_t, std::shared_ptr<const wire::Bytes>>> inits_ ABSL_GUARDED_BY(mu_);
  std::deque<std::pair<uint32_t, bool>> pulls_ ABSL_GUARDED_BY(mu_);
  std::deque<Arrival> arrivals_ ABSL_GUARDED_BY(mu_);
  std::deque<SyncEvent> events_ ABSL_GUARDED_BY(mu_);
  const size_t max_events_;
  uint64_t pending_pushes_ ABSL_GUARDED_BY(mu_) = 0;  // queued or unanswered
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  std::string fatal_ ABSL_GUARDED_BY(mu_);
  SyncStats stats_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> shard_fleet_us_ ABSL_GUARDED_BY(mu_);
  LinkMeter up_ ABSL_GUARDED_BY(mu_), down_ ABSL_GUARDED_BY(mu_);
  double down_bytes_per_param_ ABSL_GUARDED_BY(mu_) = 0;  // moving average over updates
  wire::LearnerFiguresFields progress_ ABSL_GUARDED_BY(mu_);
  const std::string host_;
  std::atomic<uint64_t> step_time_us_{0};
  std::atomic<uint64_t> fleet_step_time_us_{0};
};

}  // namespace diloco::worker
