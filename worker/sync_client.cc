#include "worker/sync_client.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <map>
#include <optional>
#include <thread>
#include <zmq.hpp>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checksum.h"
#include "common/mutex.h"
#include "kernels/optim.h"
#include "schema/curve.h"
#include "schema/handshake_monitor.h"
#include "schema/train.h"
#include "schema/transport.h"
#include "worker/fragment_update.h"
#include "worker/link_pace.h"
#include "worker/push_codec.h"

namespace diloco::worker {

using wire::AckStatus;
using wire::ErrorCode;
using wire::MsgType;

namespace {

double Ema(double old, double x, double a = 0.1) { return old == 0 ? x : (1 - a) * old + a * x; }

// A whole host buffer as the ranged access the training-thread code uses.
auto Whole(std::span<float> params) {
  return [params](uint64_t offset, uint64_t n) { return params.subspan(offset, n); };
}

}  // namespace

const char* SyncEventName(SyncEvent::Kind k) {
  switch (k) {
    case SyncEvent::kPush:
      return "push";
    case SyncEvent::kApplied:
      return "applied";
    case SyncEvent::kDuplicate:
      return "duplicate";
    case SyncEvent::kStale:
      return "stale";
    case SyncEvent::kRefused:
      return "refused";
    case SyncEvent::kShardRestart:
      return "shard_restart";
  }
  return "unknown";
}

// A push: metadata from the training thread, encoded and kept by the I/O thread until answered.
struct PushJob {
  uint32_t fragment = 0;
  uint64_t seq = 0, base_version = 0, tokens = 0;
  uint32_t steps = 0;
  EncodedPush push;        // the payload, set by the I/O thread (worker/push_codec.h)
  bool in_flight = false;  // sent on this connection and counted against the shard's credit
  // The shard answered Queued on this connection: it holds the push, and a new incarnation
  // (OnWelcome) is what would lose it, so only retry_max's last-resort resend remains.
  bool queued = false;
  absl::Time sent = absl::InfinitePast();
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
  absl::Time pushed = absl::InfinitePast();  // answers_push: when the push was sent
};

struct ShardLink {
  uint32_t index = 0;
  std::string endpoint;
  std::unique_ptr<zmq::socket_t> socket;   // data: pushes, pulls, uploads, fragments
  std::unique_ptr<zmq::socket_t> control;  // heartbeats only, so they never queue behind a
                                           // payload; null with SyncOptions::control_channel off
  // With CURVE: a shard that refuses this worker's key says so only in a handshake event.
  // Declared after the sockets they watch, so destroyed first.
  std::unique_ptr<wire::HandshakeMonitor> monitor, control_monitor;
  wire::TrainAssembler trains;          // FragmentUpdates of several chunks, on the data connection
  wire::TrainAssembler control_trains;  // none expected; kept apart all the same
  bool welcomed = false;
  bool control_welcomed = false;
  uint64_t incarnation = 0;
  uint64_t fleet_step_time_us = 0;  // this shard's latest view; 0 = unknown
  uint64_t credit_bytes = 0;        // from Welcome: push bytes in flight at once; 0 = no limit
  absl::Time last_heard, last_hello = absl::InfinitePast(), last_heartbeat = absl::InfinitePast();
  absl::Time last_data = absl::InfinitePast();  // anything, a chunk too, on the data connection
  // The data connection's measured rates (worker/link_pace.h): down from what arrives while
  // answers are awaited, up from how fast pushes are taken (their Queued answers).
  LinkPace down, up;
  absl::Time last_control_hello = absl::InfinitePast();
  absl::Duration backoff = absl::Milliseconds(100);
  // At most one per fragment of this shard (the outstanding rule), so bounded by construction.
  std::map<std::pair<uint32_t, uint64_t>, PushJob> unacked;  // (fragment, seq)
  std::vector<uint32_t> fragments;
  std::map<uint32_t, uint64_t> shard_version;  // last published version the shard told us
};

struct FragmentSync {  // training-thread view of one fragment
  const Fragment* spec = nullptr;
  bool joined = false;   // pulled at least once: local started from the global values
  uint64_t version = 0;  // adopted global version (0 after a shard restart: take any)
  int64_t steps = 0;     // inner steps since the last push (kKeep) or adoption (kLerp)
  int64_t offset = 0;    // extra steps before the first push (streaming stagger)
  uint64_t tokens = 0;
  uint64_t next_seq = 1;
  bool outstanding = false;
  // kKeep: an adoption while the push was outstanding already took `delta` out of the local
  // progress (it assumed the push applied), so the push's own answer must not take it again.
  bool delta_taken = false;
  std::vector<float> delta;  // written by training, owned by the I/O thread while outstanding
  std::vector<float> error;  // error feedback residual, I/O thread only
};

struct SyncClient::Impl {
  SyncOptions opt;
  Plan plan;
  uint64_t model_fp = 0;
  std::vector<float> anchor;  // flat: global values adopted last (training thread)
  std::vector<FragmentSync> frags;
  uint32_t joined_count = 0;  // training thread
  std::atomic<bool> all_joined{false};
  std::atomic<uint64_t> step_time_us{0};
  std::atomic<uint64_t> fleet_step_time_us{0};

  // Shared between threads.
  mutable Mutex mu;
  CondVar cv;  // signalled with arrivals, answers and a fatal refusal
  // Due pushes (metadata; the delta is in frags[f].delta).
  std::deque<PushJob> push_queue ABSL_GUARDED_BY(mu);
  std::deque<std::pair<uint32_t, std::shared_ptr<const wire::Bytes>>> init_queue
      ABSL_GUARDED_BY(mu);
  std::deque<Arrival> arrivals ABSL_GUARDED_BY(mu);
  // Fragments the training thread could not rebuild from a chain of updates (it holds another
  // version, or the result missed its checksum): pulled whole; true: the pull's answer is the
  // answer to the outstanding push.
  std::deque<std::pair<uint32_t, bool>> pull_requests ABSL_GUARDED_BY(mu);
  std::deque<SyncEvent> events ABSL_GUARDED_BY(mu);
  uint64_t pending_pushes ABSL_GUARDED_BY(mu) = 0;  // queued or unacked
  bool draining ABSL_GUARDED_BY(mu) = false;
  std::atomic<bool> drained{false};  // Drain returned: nothing more is sent (or re-sent)
  // A non-retryable refusal (wrong plan, model, identity or CURVE key).
  std::string fatal ABSL_GUARDED_BY(mu);
  SyncStats stats ABSL_GUARDED_BY(mu);

  // I/O thread only.
  std::vector<bool> joined_io;  // a FragmentUpdate for it has arrived
  // A Duplicate answer: the push was applied before its Applied update got lost, so the update
  // the pull brings is that push's answer (it holds the push's delta; kKeep takes it out).
  std::vector<bool> answer_by_pull;
  std::vector<absl::Time> join_asked;
  std::vector<absl::Duration> join_interval;  // doubles with each re-ask (retry_max)
  uint32_t corrupt_sends_left = 0;            // SyncOptions::test_corrupt_push_sends

  std::atomic<bool> stop{false};
  std::thread io;
  zmq::context_t ctx{1};
  std::vector<ShardLink> links;

  // Training thread.
  std::vector<float> update_scratch;  // a chunk of a fragment rebuilt from quantized updates
  void Process(SyncClient::ParamsFn params, Arrival& a);
  void Adopt(SyncClient::ParamsFn params, Arrival& a);
  // Lockstep: processes arrivals until none of `fragments` has a push outstanding.
  void AwaitAnswers(SyncClient::ParamsFn params, const std::vector<uint32_t>& fragments);

  // I/O thread.
  void IoLoop();
  void Connect(ShardLink& l);
  void Open(ShardLink& l, bool control);
  void CheckHandshakes(ShardLink& l);
  void SendHello(ShardLink& l);
  void SendControlHello(ShardLink& l);
  void SendHeartbeat(ShardLink& l);
  void OnMessage(ShardLink& l, wire::Message m, bool via_control);
  void OnWelcome(ShardLink& l, const wire::Header& h);
  void OnPushAck(ShardLink& l, const wire::Header& h);
  void OnError(ShardLink& l, const wire::Header& h);
  void SendPush(ShardLink& l, PushJob& job);
  // Sends kept pushes not yet in flight, oldest fragment first, as far as the credit allows.
  void PumpPushes(ShardLink& l);
  void SendPull(ShardLink& l, uint32_t fragment);
  void SendInit(ShardLink& l, uint32_t fragment, std::shared_ptr<const wire::Bytes> values);
  void AskJoin(ShardLink& l, uint32_t fragment);
  // Bytes that may arrive on l's data connection before an answer now asked for: the whole
  // fragments its unjoined fragments' asks bring.
  uint64_t JoinBytesAhead(const ShardLink& l) const;
  // Push bytes on l's data connection the shard has not taken yet (in flight, not Queued).
  static uint64_t PushBytesAhead(const ShardLink& l);
  // Whether answers are expected on l's data connection (joins or pushes outstanding).
  bool Awaiting(const ShardLink& l) const { return !l.unacked.empty() || JoinBytesAhead(l) > 0; }
  void EncodePush(PushJob& job);
  void UndoErrorFeedback(const PushJob& job);
  // Removes a kept push after its final answer; `applied` false undoes its error feedback.
  void Finish(ShardLink& l, std::map<std::pair<uint32_t, uint64_t>, PushJob>::iterator it,
              bool applied);
  void ReadVersions(ShardLink& l, const wire::Header& h);
  wire::HeaderFields Header(MsgType t) const;
  void Deliver(Arrival a) {
    MutexLock g(&mu);
    arrivals.push_back(std::move(a));
    cv.SignalAll();
  }
  void Event(SyncEvent e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    if (events.size() >= opt.max_events) events.pop_front();
    events.push_back(std::move(e));
  }
};

SyncClient::SyncClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

SyncClient::~SyncClient() {
  impl_->stop = true;
  if (impl_->io.joinable()) impl_->io.join();
}

absl::StatusOr<std::unique_ptr<SyncClient>> SyncClient::Create(const SyncOptions& o,
                                                               const Manifest& manifest) {
  if (o.servers.empty()) return absl::InvalidArgumentError("sync: no servers given");
  if (o.inner_steps == 0) return absl::InvalidArgumentError("sync: inner steps must be positive");
  if (!(o.adopt_alpha >= 0.0f && o.adopt_alpha <= 1.0f))
    return absl::InvalidArgumentError("sync: adopt_alpha must be in [0, 1]");
  if (auto s = kernels::ValidateCodec(o.codec); !s.ok()) return s;
  auto plan = Plan::Create(manifest, o.num_fragments, static_cast<uint32_t>(o.servers.size()));
  if (!plan.ok()) return plan.status();
  auto impl = std::make_unique<Impl>();
  impl->opt = o;
  impl->corrupt_sends_left = o.test_corrupt_push_sends;
  if (impl->opt.generation == 0)
    impl->opt.generation = static_cast<uint64_t>(absl::ToUnixMicros(absl::Now()));
  impl->plan = std::move(*plan);
  impl->model_fp = manifest.fingerprint();
  impl->anchor.assign(manifest.total_elements(), 0.0f);
  impl->frags.resize(o.num_fragments);
  {
    MutexLock g(&impl->mu);  // no other thread yet; the lock satisfies the analysis
    impl->stats.versions.assign(o.num_fragments, 0);
  }
  impl->joined_io.assign(o.num_fragments, false);
  impl->answer_by_pull.assign(o.num_fragments, false);
  impl->join_asked.assign(o.num_fragments, absl::InfinitePast());
  impl->join_interval.assign(o.num_fragments, o.join_retry);
  for (uint32_t i = 0; i < o.num_fragments; ++i) {
    auto& f = impl->frags[i];
    f.spec = &impl->plan.fragment(i);
    f.delta.assign(f.spec->numel, 0.0f);
    f.error.assign(f.spec->numel, 0.0f);
  }
  impl->links.resize(o.servers.size());
  for (uint32_t s = 0; s < o.servers.size(); ++s) {
    impl->links[s].index = s;
    impl->links[s].endpoint = o.servers[s];
    impl->links[s].fragments = impl->plan.FragmentsOfShard(s);
    impl->links[s].down = impl->links[s].up = LinkPace(o.link_rate_floor);
  }
  return std::unique_ptr<SyncClient>(new SyncClient(std::move(impl)));
}

uint64_t SyncClient::plan_fingerprint() const { return impl_->plan.fingerprint(); }
std::span<const float> SyncClient::global_params() const { return impl_->anchor; }
bool SyncClient::joined() const { return impl_->all_joined.load(); }

SyncStats SyncClient::stats() const {
  MutexLock g(&impl_->mu);
  SyncStats s = impl_->stats;
  s.step_time_us = static_cast<double>(impl_->step_time_us.load());
  s.fleet_step_time_us = static_cast<double>(impl_->fleet_step_time_us.load());
  return s;
}

std::vector<SyncEvent> SyncClient::TakeEvents() {
  MutexLock g(&impl_->mu);
  std::vector<SyncEvent> out(std::make_move_iterator(impl_->events.begin()),
                             std::make_move_iterator(impl_->events.end()));
  impl_->events.clear();
  return out;
}

absl::Status SyncClient::Join(std::span<float> params, absl::Duration deadline) {
  Impl& im = *impl_;
  if (params.size() != im.plan.total_elements())
    return absl::InvalidArgumentError("sync: parameter buffer does not match the manifest");
  if (!im.io.joinable()) im.io = std::thread([&im] { im.IoLoop(); });
  const absl::Time end = absl::Now() + deadline;
  while (im.joined_count < im.frags.size()) {
    std::deque<Arrival> arrived;
    {
      MutexLock lk(&im.mu);
      if (!im.fatal.empty()) return absl::FailedPreconditionError(im.fatal);
      if (absl::Now() >= end) {
        return absl::DeadlineExceededError(
            absl::StrCat("sync: joined ", im.joined_count, " of ", im.frags.size(),
                         " fragments before the deadline; are all shards up (",
                         absl::StrJoin(im.opt.servers, ","), ")? Still trying in the background"));
      }
      im.cv.WaitWithTimeout(&im.mu, absl::Milliseconds(20));
      arrived.swap(im.arrivals);
    }
    for (auto& a : arrived) im.Process(Whole(params), a);
  }
  return absl::OkStatus();
}

absl::Status SyncClient::Drain(std::span<float> params, absl::Duration timeout) {
  Impl& im = *impl_;
  absl::Time end = absl::Now() + timeout;
  absl::Status status = absl::OkStatus();
  for (;;) {
    std::deque<Arrival> arrived;
    bool done = false;
    {
      MutexLock lk(&im.mu);
      im.draining = true;
      const uint64_t before = im.pending_pushes;
      if (im.pending_pushes > 0 && absl::Now() < end)
        im.cv.WaitWithTimeout(&im.mu, absl::Milliseconds(20));
      if (im.pending_pushes < before) end = absl::Now() + timeout;  // an answer: still serving
      arrived.swap(im.arrivals);
      done = im.pending_pushes == 0 || absl::Now() >= end;
      if (im.pending_pushes > 0 && done)
        status = absl::DeadlineExceededError(
            absl::StrCat("sync: ", im.pending_pushes, " pushes still unanswered at exit"));
    }
    for (auto& a : arrived) im.Process(Whole(params), a);
    if (done) {
      im.drained = true;
      return status;
    }
  }
}

// ---- Training thread --------------------------------------------------------------------

void SyncClient::Impl::Process(SyncClient::ParamsFn params, Arrival& a) {
  FragmentSync& f = frags[a.fragment];
  switch (a.kind) {
    case Arrival::kUpdate:
      Adopt(params, a);
      return;
    case Arrival::kDone:
      f.outstanding = f.delta_taken = false;
      return;
    case Arrival::kReset:
      f.version = 0;  // the shard may have gone back: adopt whatever it sends next
      return;
    case Arrival::kNeedInit: {
      // An unjoined fragment offers the local values (theta(0) during Join); a joined one the
      // last global values, so a shard that lost its state resumes from the fleet's model.
      auto bytes = std::make_shared<wire::Bytes>(f.spec->numel * sizeof(float));
      if (f.joined) {
        plan.Gather(*f.spec, anchor.data(), reinterpret_cast<float*>(bytes->data()));
      } else {
        float* out = reinterpret_cast<float*>(bytes->data());
        for (const Piece& p : f.spec->pieces) {
          const std::span<const float> local = params(p.flat_offset, p.length);
          out = std::copy(local.begin(), local.end(), out);
        }
      }
      MutexLock g(&mu);
      init_queue.emplace_back(a.fragment, std::move(bytes));
      return;
    }
  }
}

// Takes the arrived global fragment and sets anchor = global. kKeep: local = global + the local
// progress the global values do not hold (local - anchor, plus the outstanding delta when they
// hold this worker's push); kLerp: local = lerp(global, local, alpha). The first adoption (the
// join) always takes the global values, so theta(0) is the same everywhere. A chain of quantized
// updates is rebuilt on the anchor chunk by chunk (worker/fragment_update.h); one this worker
// cannot rebuild (it holds an older version) is asked for whole instead.
void SyncClient::Impl::Adopt(SyncClient::ParamsFn params, Arrival& a) {
  FragmentSync& f = frags[a.fragment];
  const wire::Message& m = *a.message;
  const bool chain = IsUpdateChain(m.header());
  const bool newer = !f.joined || a.version > f.version;
  if (chain && newer && (!f.joined || f.version < m.header().base_version())) {
    MutexLock g(&mu);
    pull_requests.emplace_back(a.fragment, a.answers_push);
    return;
  }
  const bool was_outstanding = f.outstanding;
  if (a.answers_push) f.outstanding = false;
  if (!newer) {  // nothing newer than what we have
    if (!f.outstanding) f.delta_taken = false;
    return;
  }
  const bool keep = f.joined && opt.adopt == SyncOptions::Adopt::kKeep;
  const float alpha = f.joined ? opt.adopt_alpha : 0.0f;
  // The global values hold our push when they answer it, and are assumed to when a push is
  // still outstanding (its answer will not take the delta out a second time).
  const bool take_delta = keep && was_outstanding && !f.delta_taken;
  // Positions of the fragment's own (delta) order map onto its pieces of the flat model.
  auto for_pieces = [&](uint64_t pos, uint64_t n, auto&& fn) {
    uint64_t start = 0;
    for (const Piece& pc : f.spec->pieces) {
      if (n == 0) break;
      if (pos < start + pc.length) {
        const uint64_t in_piece = pos - start, take = std::min(n, pc.length - in_piece);
        fn(pc.flat_offset + in_piece, take, pos);
        pos += take;
        n -= take;
      }
      start += pc.length;
    }
  };
  auto gather = [&](uint64_t pos, std::span<float> out) {
    for_pieces(pos, out.size(), [&](uint64_t flat, uint64_t take, uint64_t at) {
      std::memcpy(out.data() + (at - pos), anchor.data() + flat, take * sizeof(float));
    });
  };
  auto consume = [&](uint64_t pos, std::span<const float> values) {
    for_pieces(pos, values.size(), [&](uint64_t flat, uint64_t take, uint64_t at) {
      const std::span<const float> global = values.subspan(at - pos, take);
      const std::span<float> anc(anchor.data() + flat, take);
      const std::span<float> local = params(flat, take);
      if (keep) {
        kernels::RebaseAdopt(global, anc, local,
                             take_delta ? std::span<const float>(f.delta.data() + at, take)
                                        : std::span<const float>());
      } else {
        std::memcpy(anc.data(), global.data(), take * sizeof(float));
        kernels::LerpAdopt(anc, local, alpha);
      }
    });
  };
  auto read = ReadFragmentUpdate(m, f.version, update_scratch, gather, consume);
  const bool mismatch = chain && (!read.ok() || *read != m.header().values_checksum());
  f.delta_taken = f.outstanding && (f.delta_taken || take_delta);
  if (!f.joined) {
    f.joined = true;
    // Streaming: fragment i first pushes after (1 + i/P) * H steps, so pushes spread evenly.
    if (opt.stream)
      f.offset = static_cast<int64_t>(f.spec->id) * opt.inner_steps / opt.num_fragments;
    if (++joined_count == frags.size()) all_joined = true;
    f.steps = 0;
    f.tokens = 0;
  } else if (!keep) {  // the local steps since the push are gone: count afresh
    f.steps = 0;
    f.tokens = 0;
  }
  // A rebuilt fragment that differs from the shard's (never expected) is taken as version 0: no
  // push leaves it, and the whole fragment, asked for now, replaces it. Adoption moved local
  // and anchor together, so the whole one's adoption keeps this worker's progress.
  f.version = mismatch ? 0 : a.version;
  MutexLock g(&mu);
  if (mismatch) {
    ++stats.download_mismatches;
    pull_requests.emplace_back(a.fragment, false);
  }
  ++(chain ? stats.updates_delta : stats.updates_full);
  if (a.answers_push && a.pushed != absl::InfinitePast()) {
    const double ms = absl::ToDoubleMilliseconds(absl::Now() - a.pushed);
    stats.push_to_adopt_ms = Ema(stats.push_to_adopt_ms, ms, 0.1);
    stats.push_to_adopt_max_ms = std::max(stats.push_to_adopt_max_ms, ms);
    auto& recent = stats.recent_push_to_adopt_ms;
    if (recent.size() == SyncStats::kRecentLatencies) recent.erase(recent.begin());
    recent.push_back(ms);
  }
  stats.versions[a.fragment] = f.version;
  stats.joined = joined_count;
  ++stats.adoptions;
}

void SyncClient::Impl::AwaitAnswers(SyncClient::ParamsFn params,
                                    const std::vector<uint32_t>& fragments) {
  const absl::Time end = absl::Now() + opt.lockstep_timeout;
  auto pending = [&] {
    for (uint32_t id : fragments)
      if (frags[id].outstanding) return true;
    return false;
  };
  while (pending() && absl::Now() < end && !stop) {
    std::deque<Arrival> arrived;
    {
      MutexLock lk(&mu);
      if (arrivals.empty()) cv.WaitWithTimeout(&mu, absl::Milliseconds(20));
      arrived.swap(arrivals);
    }
    for (auto& a : arrived) Process(params, a);
  }
}

void SyncClient::AfterStep(std::span<float> params, uint64_t tokens, absl::Duration step_time) {
  AfterStep(Whole(params), tokens, step_time);
}

void SyncClient::AfterStep(ParamsFn params, uint64_t tokens, absl::Duration step_time) {
  const absl::Time t0 = absl::Now();
  Impl& im = *impl_;
  const double step_us =
      Ema(static_cast<double>(im.step_time_us.load()), absl::ToDoubleMicroseconds(step_time));
  im.step_time_us = static_cast<uint64_t>(step_us);
  std::deque<Arrival> arrived;
  bool draining;
  {
    MutexLock g(&im.mu);
    arrived.swap(im.arrivals);
    draining = im.draining;
  }
  for (auto& a : arrived) im.Process(params, a);
  // Dynamic Local Updates: a slower worker takes fewer inner steps per push.
  uint32_t h = im.opt.inner_steps;
  const double fleet = static_cast<double>(im.fleet_step_time_us.load());
  if (im.opt.dylu && fleet > 0 && step_us > 0)
    h = std::max<uint32_t>(
        1, static_cast<uint32_t>(im.opt.inner_steps * std::min(1.0, fleet / step_us)));
  std::vector<PushJob> due;
  for (auto& f : im.frags) {
    ++f.steps;
    f.tokens += tokens;
    if (draining || !f.joined || f.outstanding || f.version == 0 ||
        f.steps < static_cast<int64_t>(h) + f.offset)
      continue;
    // delta = anchor - local, gathered into the fragment's own order.
    float* d = f.delta.data();
    for (const Piece& p : f.spec->pieces) {
      kernels::Delta(std::span<const float>(im.anchor.data() + p.flat_offset, p.length),
                     params(p.flat_offset, p.length), std::span<float>(d, p.length));
      d += p.length;
    }
    f.outstanding = true;
    f.offset = 0;
    PushJob job;
    job.made = absl::Now();
    job.fragment = f.spec->id;
    job.seq = f.next_seq++;
    job.base_version = f.version;
    job.tokens = std::max<uint64_t>(f.tokens, 1);
    job.steps = static_cast<uint32_t>(std::max<int64_t>(f.steps, 1));
    due.push_back(std::move(job));
    if (im.opt.adopt == SyncOptions::Adopt::kKeep) {  // the next push counts from this one
      f.steps = 0;
      f.tokens = 0;
    }
  }
  const double cost_us = absl::ToDoubleMicroseconds(absl::Now() - t0);
  std::vector<uint32_t> pushed;
  {
    MutexLock g(&im.mu);
    im.stats.inner_steps_now = h;
    im.stats.after_step_us = Ema(im.stats.after_step_us, cost_us, 0.02);
    im.stats.after_step_max_us = std::max(im.stats.after_step_max_us, cost_us);
    im.pending_pushes += due.size();
    for (auto& j : due) {
      pushed.push_back(j.fragment);
      im.push_queue.push_back(std::move(j));
    }
  }
  if (im.opt.lockstep && !pushed.empty()) im.AwaitAnswers(params, pushed);
}

// ---- I/O thread -------------------------------------------------------------------------

wire::HeaderFields SyncClient::Impl::Header(MsgType t) const {
  wire::HeaderFields h;
  h.type = t;
  h.plan_fingerprint = plan.fingerprint();
  h.model_fingerprint = model_fp;
  h.worker_id = opt.worker_id;
  h.generation = opt.generation;
  h.step_time_us = step_time_us.load();
  return h;
}

// A fresh socket for one of the link's connections, monitored for a refused CURVE key before
// it connects, so the first handshake's verdict is seen too.
void SyncClient::Impl::Open(ShardLink& l, bool control) {
  auto& socket = control ? l.control : l.socket;
  auto& monitor = control ? l.control_monitor : l.monitor;
  monitor.reset();  // before the socket it watches
  socket = std::make_unique<zmq::socket_t>(ctx, zmq::socket_type::dealer);
  wire::ConfigureSocket(*socket);
  if (!opt.curve_server_key.empty()) {  // keys checked by the caller; a bad one is refused there
    (void)wire::MakeCurveClient(*socket, opt.curve_server_key, opt.curve_public_key,
                                opt.curve_secret_key);
    monitor = std::make_unique<wire::HandshakeMonitor>(ctx, *socket);
  }
  socket->set(zmq::sockopt::linger, 0);
  socket->set(zmq::sockopt::reconnect_ivl, 100);
  socket->set(zmq::sockopt::reconnect_ivl_max, 2000);
  socket->connect(l.endpoint);
}

// Two connections per shard, each its own TCP stream: a heartbeat on the control one is not
// held behind a fragment that takes longer than the liveness timeout to cross a slow link.
void SyncClient::Impl::Connect(ShardLink& l) {
  Open(l, /*control=*/false);
  l.trains.Drop("");  // a train half-received on the old socket never completes
  l.control_trains.Drop("");
  if (opt.control_channel) Open(l, /*control=*/true);
  l.welcomed = l.control_welcomed = false;
  l.last_heard = absl::Now();
  l.last_hello = l.last_control_hello = absl::InfinitePast();
}

// A shard whose ZAP handler does not list this worker's key refuses every handshake; libzmq
// would retry forever in silence. That is a refusal like a wrong plan: no retry changes it.
void SyncClient::Impl::CheckHandshakes(ShardLink& l) {
  for (auto* m : {l.monitor.get(), l.control_monitor.get()}) {
    if (!m) continue;
    auto refusal = m->TakeRefusal();
    if (!refusal) continue;
    MutexLock g(&mu);
    ++stats.errors;
    if (!fatal.empty()) continue;
    fatal =
        absl::StrCat("shard ", l.index, " (", l.endpoint, ") refuses this worker: ", *refusal,
                     "; is this worker's public key ", opt.curve_public_key, " listed for worker ",
                     opt.worker_id, " in the shard's --curve_authorized_keys?");
    cv.SignalAll();
  }
}

void SyncClient::Impl::SendHello(ShardLink& l) {
  (void)wire::Send(*l.socket, Header(MsgType::Hello), {});
  l.last_hello = absl::Now();
}

// After the data connection's Welcome: the shard binds a control connection only to a worker
// it already knows in this generation.
void SyncClient::Impl::SendControlHello(ShardLink& l) {
  auto h = Header(MsgType::Hello);
  h.channel = wire::Channel::Control;
  (void)wire::Send(*l.control, h, {});
  l.last_control_hello = absl::Now();
}

void SyncClient::Impl::SendHeartbeat(ShardLink& l) {
  zmq::socket_t& s = l.control_welcomed ? *l.control : *l.socket;
  (void)wire::Send(s, Header(MsgType::Heartbeat), {});
  l.last_heartbeat = absl::Now();
}

void SyncClient::Impl::SendPull(ShardLink& l, uint32_t fragment) {
  auto h = Header(MsgType::Pull);
  h.fragment_id = fragment;
  (void)wire::Send(*l.socket, h, {});
}

void SyncClient::Impl::SendInit(ShardLink& l, uint32_t fragment,
                                std::shared_ptr<const wire::Bytes> values) {
  const Fragment& f = plan.fragment(fragment);
  auto h = Header(MsgType::InitFragment);
  h.fragment_id = fragment;
  wire::SetPayloadLayout(h, wire::kFragmentCodec, f.numel);
  (void)wire::Send(*l.socket, h, wire::PayloadFrames(values, wire::kFragmentCodec, f.numel));
}

uint64_t SyncClient::Impl::JoinBytesAhead(const ShardLink& l) const {
  uint64_t bytes = 0;
  for (uint32_t id : l.fragments)
    if (!joined_io[id] && join_asked[id] != absl::InfinitePast())
      bytes += plan.fragment(id).numel * sizeof(float);
  return bytes;
}

uint64_t SyncClient::Impl::PushBytesAhead(const ShardLink& l) {
  uint64_t bytes = 0;
  for (const auto& [_, job] : l.unacked)
    if (job.in_flight && !job.queued && job.push.bytes) bytes += job.push.bytes->size();
  return bytes;
}

// An unjoined fragment: the shard's values if it has some, else ask the training thread for
// ours to upload (compare-and-set on version 0 at the shard: the first upload wins).
void SyncClient::Impl::AskJoin(ShardLink& l, uint32_t fragment) {
  if (JoinBytesAhead(l) == 0) l.down.Idle(absl::Now());  // the link starts answering now
  join_asked[fragment] = absl::Now();
  {
    MutexLock g(&mu);
    ++stats.join_asks;
  }
  auto it = l.shard_version.find(fragment);
  if (it != l.shard_version.end() && it->second == 0) {
    Deliver({Arrival::kNeedInit, fragment, 0, false, std::nullopt});
  } else {
    SendPull(l, fragment);
  }
}

void SyncClient::Impl::EncodePush(PushJob& job) {
  FragmentSync& f = frags[job.fragment];
  if (!opt.error_feedback) std::fill(f.error.begin(), f.error.end(), 0.0f);  // e = delta only
  job.push = worker::EncodePush(opt.codec, f.delta, f.error);
  if (job.push.poisoned) {
    MutexLock g(&mu);
    stats.errors += job.push.poisoned_chunks;
  }
}

// e was e0 + delta - deQ(q); back to e0, as if the push had never been taken.
void SyncClient::Impl::UndoErrorFeedback(const PushJob& job) {
  FragmentSync& f = frags[job.fragment];
  worker::UndoErrorFeedback(opt.codec, f.delta, f.error, job.push);
}

void SyncClient::Impl::Finish(ShardLink& l,
                              std::map<std::pair<uint32_t, uint64_t>, PushJob>::iterator it,
                              bool applied) {
  if (!applied) UndoErrorFeedback(it->second);
  l.unacked.erase(it);
  MutexLock g(&mu);
  if (pending_pushes > 0) --pending_pushes;
  cv.SignalAll();
}

void SyncClient::Impl::SendPush(ShardLink& l, PushJob& job) {
  const Fragment& f = plan.fragment(job.fragment);
  if (PushBytesAhead(l) == 0) l.up.Idle(absl::Now());  // the upload starts now
  auto h = Header(MsgType::Push);
  h.fragment_id = job.fragment;
  h.seq = job.seq;
  h.base_version = job.base_version;
  h.tokens = job.tokens;
  h.steps = job.steps;
  wire::SetPayloadLayout(h, opt.codec, f.numel);
  std::shared_ptr<const wire::Bytes> bytes = job.push.bytes;
  if (job.fragment == 0 && job.seq == 1 && corrupt_sends_left > 0 && !bytes->empty()) {
    --corrupt_sends_left;  // test only (SyncOptions::test_corrupt_push_sends): a damaged copy
    auto damaged = std::make_shared<wire::Bytes>(*bytes);
    damaged->back() ^= 0x01;
    bytes = std::move(damaged);
  }
  if (wire::SendWithChecksums(*l.socket, h, wire::PayloadFrames(bytes, opt.codec, f.numel),
                              job.push.checksums)
          .ok()) {
    MutexLock g(&mu);
    stats.bytes_sent += job.push.bytes->size();
  }
  job.sent = absl::Now();
}

void SyncClient::Impl::PumpPushes(ShardLink& l) {
  uint64_t in_flight = 0;
  for (const auto& [_, job] : l.unacked)
    if (job.in_flight) in_flight += job.push.bytes->size();
  const absl::Time now = absl::Now();
  for (auto& [_, job] : l.unacked) {
    if (job.in_flight || now < job.not_before) continue;
    const uint64_t bytes = job.push.bytes->size();
    // One push is always allowed, so a fragment larger than the credit still goes.
    if (l.credit_bytes > 0 && in_flight > 0 && in_flight + bytes > l.credit_bytes) return;
    SendPush(l, job);
    job.in_flight = true;
    in_flight += bytes;
  }
}

void SyncClient::Impl::ReadVersions(ShardLink& l, const wire::Header& h) {
  if (h.versions())
    for (const auto* fv : *h.versions())
      if (fv->id() < frags.size()) l.shard_version[fv->id()] = fv->version();
  if (h.fleet_step_time_us() > 0) {
    l.fleet_step_time_us = h.fleet_step_time_us();
    uint64_t fleet = 0;
    for (const auto& o : links)
      if (o.fleet_step_time_us > 0 && (fleet == 0 || o.fleet_step_time_us < fleet))
        fleet = o.fleet_step_time_us;
    fleet_step_time_us = fleet;
  }
}

void SyncClient::Impl::OnWelcome(ShardLink& l, const wire::Header& h) {
  if (h.shard() != l.index) {  // same plan, another shard: --servers is out of shard order
    MutexLock g(&mu);
    ++stats.errors;
    fatal = absl::StrCat("the shard at ", l.endpoint, " is shard ", h.shard(), ", but --servers ",
                         "lists it as shard ", l.index, ": list the shards' endpoints in shard ",
                         "order (shard 0 first)");
    cv.SignalAll();
    return;
  }
  const bool restarted = l.incarnation != 0 && l.incarnation != h.incarnation();
  // A Welcome on a link that was already welcomed by the same incarnation only refreshes the
  // versions and the fleet's step time (DyLU's periodic Hello).
  const bool fresh = !l.welcomed || restarted;
  l.incarnation = h.incarnation();
  l.welcomed = true;
  l.credit_bytes = h.credit_bytes();
  l.backoff = absl::Milliseconds(100);
  ReadVersions(l, h);
  if (!fresh) return;
  if (restarted) {
    l.control_welcomed = false;  // the new process has no binding for it
    MutexLock g(&mu);
    ++stats.shard_restarts;
    Event({SyncEvent::kShardRestart, l.index, 0, 0, 0, 0, ""});
  }
  // Everything not yet answered goes again with its sequence number: the shard's dedup table
  // keeps it exactly-once. A fragment the shard has no values for cannot take it.
  for (auto it = l.unacked.begin(); it != l.unacked.end();) {
    auto next = std::next(it);
    if (l.shard_version[it->first.first] == 0) {
      const uint32_t fragment = it->first.first;
      Finish(l, it, /*applied=*/false);
      Deliver({Arrival::kDone, fragment, 0, true, std::nullopt});
    } else if (it->second.in_flight) {
      it->second.in_flight = false;  // counted afresh against the (new) credit
      it->second.queued = false;
      it->second.resend_interval = opt.resend_after;
      MutexLock g(&mu);
      ++stats.resends;
    }
    it = next;
  }
  PumpPushes(l);
  for (uint32_t id : l.fragments) {
    if (!joined_io[id]) {
      join_interval[id] = opt.join_retry;
      AskJoin(l, id);
    } else if (restarted) {
      // The shard may have gone back to an older checkpoint (periodic durability), or lost
      // everything: take its versions as they are, or give it the fleet's last values.
      Deliver({Arrival::kReset, id, 0, false, std::nullopt});
      if (l.shard_version[id] == 0) {
        Deliver({Arrival::kNeedInit, id, 0, false, std::nullopt});
      } else {
        SendPull(l, id);
      }
    }
  }
}

void SyncClient::Impl::OnPushAck(ShardLink& l, const wire::Header& h) {
  const auto key = std::make_pair(h.fragment_id(), h.seq());
  switch (h.ack()) {
    case AckStatus::Queued:  // keep it until Applied: a crash before then means resend
      if (auto it = l.unacked.find(key); it != l.unacked.end()) {
        if (!it->second.queued && it->second.push.bytes)
          l.up.Arrived(it->second.push.bytes->size(), absl::Now(), /*awaiting=*/true);
        it->second.sent = absl::Now();
        it->second.queued = true;
      }
      return;
    case AckStatus::Initialized:
    case AckStatus::AlreadyInitialized:
      l.shard_version[h.fragment_id()] = std::max<uint64_t>(h.version(), 1);
      SendPull(l, h.fragment_id());
      if (h.fragment_id() < join_asked.size()) join_asked[h.fragment_id()] = absl::Now();
      return;
    case AckStatus::Duplicate:
    case AckStatus::Stale: {
      auto it = l.unacked.find(key);
      if (it == l.unacked.end()) return;
      const bool stale = h.ack() == AckStatus::Stale;
      const PushJob& job = it->second;
      {
        MutexLock g(&mu);
        ++(stale ? stats.stale : stats.duplicates);
        Event({stale ? SyncEvent::kStale : SyncEvent::kDuplicate, l.index, job.fragment, job.seq,
               job.base_version, h.version(), ""});
      }
      Finish(l, it, /*applied=*/!stale);  // a duplicate was applied before its ack got lost
      if (stale) {
        Deliver({Arrival::kDone, h.fragment_id(), 0, true, std::nullopt});
      } else {
        answer_by_pull[h.fragment_id()] = true;  // outstanding until the pulled update comes
      }
      SendPull(l, h.fragment_id());
      return;
    }
    default:
      return;
  }
}

void SyncClient::Impl::OnError(ShardLink& l, const wire::Header& h) {
  const ErrorCode code = h.error_code();
  const std::string what = h.message() ? h.message()->str() : "";
  {
    MutexLock g(&mu);
    ++stats.errors;
    // A refused plan, model or protocol, or a refused data-connection Hello (the CURVE
    // allow-list binds this key to another worker id, or a newer process of this worker id is
    // bound): no retry can change it. (A refused control Hello comes on the control connection
    // and is retried after the data Hello.)
    if (code == ErrorCode::WrongPlan || code == ErrorCode::WrongModel ||
        code == ErrorCode::BadProtocolVersion ||
        (code == ErrorCode::BadIdentity && h.refused_type() == MsgType::Hello)) {
      fatal = absl::StrCat("shard ", l.index, " (", l.endpoint, ") refuses this worker: ", what);
      cv.SignalAll();
    }
  }
  if (code == ErrorCode::BadIdentity) {  // the shard does not know this connection: re-Hello
    l.welcomed = false;
    return;
  }
  if (code == ErrorCode::Unavailable) return;  // retried: resend timer, join retry
  if (code == ErrorCode::NoCredit) {  // back in line; sent again once an answer frees credit
    if (auto it = l.unacked.find({h.fragment_id(), h.seq()}); it != l.unacked.end()) {
      it->second.in_flight = false;
      it->second.not_before = absl::Now() + absl::Milliseconds(200);
    }
    return;
  }
  if (code == ErrorCode::BadChecksum) {  // damaged on the way: send the same bytes once more
    if (auto it = l.unacked.find({h.fragment_id(), h.seq()});
        it != l.unacked.end() && !it->second.resent_corrupt) {
      it->second.resent_corrupt = true;
      it->second.in_flight = false;  // PumpPushes sends it again
      MutexLock g(&mu);
      ++stats.resends;
      return;
    }
  }
  if (code == ErrorCode::NotInitialized) l.shard_version[h.fragment_id()] = 0;
  // Any other refusal of a push is final for that push: release the fragment, undo its error
  // feedback, and pull (a shard that lost the fragment gets our values first).
  auto it = l.unacked.find({h.fragment_id(), h.seq()});
  if (h.seq() == 0 || it == l.unacked.end()) return;
  {
    MutexLock g(&mu);
    ++stats.refused;
    Event(
        {SyncEvent::kRefused, l.index, h.fragment_id(), h.seq(), it->second.base_version, 0, what});
  }
  Finish(l, it, /*applied=*/false);
  Deliver({Arrival::kDone, h.fragment_id(), 0, true, std::nullopt});
  if (code == ErrorCode::NotInitialized) {
    Deliver({Arrival::kNeedInit, h.fragment_id(), 0, false, std::nullopt});
  } else {
    SendPull(l, h.fragment_id());
  }
}

void SyncClient::Impl::OnMessage(ShardLink& l, wire::Message m, bool via_control) {
  const auto& h = m.header();
  l.last_heard = absl::Now();
  {
    MutexLock g(&mu);
    stats.bytes_received += m.payload_bytes();
  }
  if (via_control) {  // Welcome, Heartbeat or a refusal of either; nothing else is expected
    if (h.type() == MsgType::Error && h.error_code() == ErrorCode::BadIdentity)
      l.control_welcomed = false;  // e.g. the shard restarted: Hello again after the data Hello
    if (h.plan_fingerprint() != plan.fingerprint()) return;
    if (h.type() == MsgType::Welcome && h.channel() == wire::Channel::Control &&
        h.incarnation() == l.incarnation)
      l.control_welcomed = true;
    if (h.type() == MsgType::Welcome || h.type() == MsgType::Heartbeat) ReadVersions(l, h);
    return;
  }
  if (h.type() == MsgType::Error) return OnError(l, h);  // may name the shard's own plan
  if (h.plan_fingerprint() != plan.fingerprint()) {
    MutexLock g(&mu);
    ++stats.errors;
    return;
  }
  switch (h.type()) {
    case MsgType::Welcome:
      return OnWelcome(l, h);
    case MsgType::PushAck:
      return OnPushAck(l, h);
    case MsgType::FragmentUpdate: {
      if (h.fragment_id() >= frags.size() ||
          !CheckFragmentUpdate(m, plan.fragment(h.fragment_id()).numel).ok()) {
        MutexLock g(&mu);
        ++stats.errors;
        return;
      }
      joined_io[h.fragment_id()] = true;
      l.shard_version[h.fragment_id()] = h.version();
      bool answers = answer_by_pull[h.fragment_id()];
      answer_by_pull[h.fragment_id()] = false;
      absl::Time pushed = absl::InfinitePast();
      if (h.ack() == AckStatus::Applied && h.worker_id() == opt.worker_id &&
          h.generation() == opt.generation) {
        if (auto it = l.unacked.find({h.fragment_id(), h.seq()}); it != l.unacked.end()) {
          answers = true;
          pushed = it->second.made;
          const uint64_t base = it->second.base_version;
          // Rounds other workers closed between this push's base and its own round.
          const uint64_t staleness = wire::Staleness(base, h.version());
          {
            MutexLock g(&mu);
            ++stats.applied;
            stats.mean_staleness = Ema(stats.mean_staleness, static_cast<double>(staleness));
            stats.max_staleness = std::max(stats.max_staleness, staleness);
            Event({SyncEvent::kApplied, l.index, h.fragment_id(), h.seq(), base, h.version(), ""});
          }
          Finish(l, it, /*applied=*/true);
        }
      }
      Deliver({Arrival::kUpdate, h.fragment_id(), h.version(), answers, std::move(m), pushed});
      return;
    }
    case MsgType::Heartbeat:
      ReadVersions(l, h);
      return;
    default:
      return;
  }
}

void SyncClient::Impl::IoLoop() {
  for (auto& l : links) Connect(l);
  std::vector<zmq::pollitem_t> items;
  while (!stop) {
    items.clear();
    for (const auto& l : links) {
      items.push_back({static_cast<void*>(*l.socket), 0, ZMQ_POLLIN, 0});
      if (l.control) items.push_back({static_cast<void*>(*l.control), 0, ZMQ_POLLIN, 0});
    }
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(5));
    } catch (const zmq::error_t&) {
      continue;
    }
    for (auto& l : links) {
      for (const bool via_control : {true, false}) {
        zmq::socket_t* s = via_control ? l.control.get() : l.socket.get();
        wire::TrainAssembler& trains = via_control ? l.control_trains : l.trains;
        for (int budget = 0; s && budget < 64; ++budget) {
          const uint64_t partial = trains.partial_bytes();
          const bool awaiting = !via_control && Awaiting(l);
          auto m = wire::TryRecvMessage(*s, trains);
          // Chunks of a fragment still arriving are progress too (a join is being answered).
          if (!via_control && (!m.ok() || m->has_value() || trains.partial_bytes() != partial)) {
            const absl::Time now = absl::Now();
            l.last_data = now;
            // What crossed the link: a chunk kept for its train, or a message (less its chunks
            // that arrived before).
            const uint64_t after = trains.partial_bytes();
            uint64_t bytes = after > partial ? after - partial : 0;
            if (m.ok() && m->has_value()) {
              const uint64_t absorbed = partial > after ? partial - after : 0;
              bytes = (*m)->payload_bytes() > absorbed ? (*m)->payload_bytes() - absorbed : 0;
            }
            l.down.Arrived(bytes, now, awaiting);
          }
          if (!m.ok()) {
            MutexLock g(&mu);
            ++stats.errors;
            continue;
          }
          if (!m->has_value()) break;
          OnMessage(l, **std::move(m), via_control);
        }
      }
    }
    // New pushes and theta(0) uploads from the training thread.
    std::deque<PushJob> pushes;
    std::deque<std::pair<uint32_t, std::shared_ptr<const wire::Bytes>>> inits;
    std::deque<std::pair<uint32_t, bool>> pulls;
    {
      MutexLock g(&mu);
      pushes.swap(push_queue);
      inits.swap(init_queue);
      pulls.swap(pull_requests);
    }
    for (const auto& [id, answers] : pulls) {
      if (answers) answer_by_pull[id] = true;
      SendPull(links[plan.fragment(id).shard], id);
    }
    for (auto& [id, values] : inits) {
      ShardLink& l = links[plan.fragment(id).shard];
      if (l.welcomed) SendInit(l, id, std::move(values));  // else: asked again after Welcome
    }
    for (PushJob& job : pushes) {
      ShardLink& l = links[plan.fragment(job.fragment).shard];
      EncodePush(job);
      job.resend_interval = opt.resend_after;
      auto& kept = l.unacked[{job.fragment, job.seq}] = std::move(job);
      MutexLock g(&mu);
      ++stats.pushes;
      Event({SyncEvent::kPush, l.index, kept.fragment, kept.seq, kept.base_version, 0, ""});
    }
    // Liveness, heartbeats, resends, join retries.
    const absl::Time now = absl::Now();
    uint32_t unacked = 0;
    for (auto& l : links) {
      if (!l.welcomed || (l.control && !l.control_welcomed)) CheckHandshakes(l);
      if (now - l.last_heard > opt.shard_timeout) {
        // Silent shard: new socket, back off exponentially. Training goes on meanwhile.
        Connect(l);
        l.backoff = std::min(l.backoff * 2, opt.backoff_max);
        l.last_heard = now + l.backoff;  // give the reconnect time before judging again
        MutexLock g(&mu);
        ++stats.reconnects;
      }
      if (!l.welcomed && now - l.last_hello > l.backoff) SendHello(l);
      if (l.welcomed && opt.dylu && now - l.last_hello > opt.fleet_refresh) SendHello(l);
      if (l.welcomed && l.control && !l.control_welcomed && now - l.last_control_hello > l.backoff)
        SendControlHello(l);
      if (l.welcomed && now - l.last_heartbeat > opt.heartbeat) SendHeartbeat(l);
      if (l.welcomed && !drained) {
        PumpPushes(l);
        for (auto& [_, job] : l.unacked) {
          // A push the shard has not taken (no Queued yet) goes again once its interval has
          // passed with the data connection quiet: a shard answering other pushes meanwhile
          // is working through pushes sent together (at real sizes, seconds), and a resend
          // there costs a whole push for a Duplicate. A Queued push waits for its round (and,
          // per-round durability, its checkpoint). retry_max bounds either wait.
          const bool quiet = now - l.last_data > opt.resend_after;
          const absl::Duration wait =
              l.up.Wait(PushBytesAhead(l), job.resend_interval, opt.retry_max);
          const bool due = job.queued
                               ? now - job.sent > opt.retry_max
                               : now - job.sent > wait && (quiet || now - job.sent > opt.retry_max);
          if (job.in_flight && due) {
            SendPush(l, job);
            job.resend_interval = std::min(job.resend_interval * 2, opt.retry_max);
            MutexLock g(&mu);
            ++stats.resends;
          }
        }
        // Ask again only after the interval passed with nothing arriving on the data
        // connection: at real sizes and on slow links, the answers to the first asks take
        // longer than join_retry to arrive, and each re-ask costs a whole fragment.
        for (uint32_t id : l.fragments) {
          if (!joined_io[id] &&
              now - std::max(join_asked[id], l.last_data) >
                  l.down.Wait(JoinBytesAhead(l), join_interval[id], opt.retry_max)) {
            AskJoin(l, id);
            join_interval[id] = std::min(join_interval[id] * 2, opt.retry_max);
          }
        }
      }
      unacked += static_cast<uint32_t>(l.unacked.size());
    }
    MutexLock g(&mu);
    stats.unacked = unacked;
  }
}

}  // namespace diloco::worker
