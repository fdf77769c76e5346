#include "worker/sync_client.h"

#include <algorithm>
#include <cstring>
#include <thread>
#include <zmq.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/clock.h"
#include "common/ema.h"
#include "kernels/codec.h"
#include "kernels/optim.h"
#include "worker/fragment_update.h"
#include "worker/shard_session.h"
#include "worker/sync_shared.h"
#include "worker/zmq_shard_link.h"

namespace diloco::worker {

namespace {

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
  uint64_t pushed_base = 0;  // the base version of the last push
  // Written here when a push is due; read by the fragment's shard session while the push is
  // outstanding (PushJob, worker/sync_shared.h).
  std::vector<float> delta;
};

struct SyncClient::Impl {
  SyncOptions opt;
  Plan plan;
  uint64_t model_fp = 0;
  SyncShared shared;

  // Training thread.
  std::vector<float> anchor;  // flat: global values adopted last
  std::vector<FragmentSync> frags;
  uint32_t joined_count = 0;
  std::atomic<bool> all_joined{false};
  std::vector<float> update_scratch;  // a chunk of a fragment rebuilt from quantized updates
  void Process(SyncClient::ParamsFn params, Arrival& a);
  void Adopt(SyncClient::ParamsFn params, Arrival& a);
  // Lockstep: processes arrivals until none of `fragments` has a push outstanding.
  void AwaitAnswers(SyncClient::ParamsFn params, const std::vector<uint32_t>& fragments);

  // I/O thread: one session and one ZeroMQ link per shard.
  std::atomic<bool> stop{false};
  std::atomic<bool> drained{false};  // Drain returned: nothing more is sent (or re-sent)
  std::thread io;
  SystemClock clock;
  zmq::context_t ctx{1};
  std::vector<std::unique_ptr<ZmqShardLink>> links;
  std::vector<std::unique_ptr<ShardSession>> sessions;
  void IoLoop();
  void Receive(uint32_t shard);
  void TakeQueued();

  Impl(const SyncOptions& o, Plan p, uint64_t model_fingerprint)
      : opt(o),
        plan(std::move(p)),
        model_fp(model_fingerprint),
        shared(o.num_fragments, static_cast<uint32_t>(o.servers.size()), o.max_events) {}
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
  auto impl = std::make_unique<Impl>(o, std::move(*plan), manifest.fingerprint());
  if (impl->opt.generation == 0)
    impl->opt.generation = static_cast<uint64_t>(absl::ToUnixMicros(absl::Now()));
  impl->anchor.assign(manifest.total_elements(), 0.0f);
  impl->frags.resize(o.num_fragments);
  std::vector<std::span<const float>> deltas;
  for (uint32_t i = 0; i < o.num_fragments; ++i) {
    auto& f = impl->frags[i];
    f.spec = &impl->plan.fragment(i);
    f.delta.assign(f.spec->numel, 0.0f);
    deltas.emplace_back(f.delta);
  }
  const WorkerIdentity who{impl->plan.fingerprint(), impl->model_fp, impl->opt.worker_id,
                           impl->opt.generation};
  for (uint32_t s = 0; s < o.servers.size(); ++s) {
    impl->links.push_back(std::make_unique<ZmqShardLink>(impl->ctx, o.servers[s], impl->opt));
    impl->sessions.push_back(std::make_unique<ShardSession>(s, o.servers[s], impl->opt, impl->plan,
                                                            who, deltas, impl->clock,
                                                            *impl->links[s], impl->shared));
  }
  return std::unique_ptr<SyncClient>(new SyncClient(std::move(impl)));
}

uint64_t SyncClient::plan_fingerprint() const { return impl_->plan.fingerprint(); }
std::span<const float> SyncClient::global_params() const { return impl_->anchor; }
bool SyncClient::joined() const { return impl_->all_joined.load(); }

SyncStats SyncClient::stats() const { return impl_->shared.stats(); }
std::vector<SyncEvent> SyncClient::TakeEvents() { return impl_->shared.TakeEvents(); }

absl::Status SyncClient::Join(std::span<float> params, absl::Duration deadline) {
  Impl& im = *impl_;
  if (params.size() != im.plan.total_elements())
    return absl::InvalidArgumentError("sync: parameter buffer does not match the manifest");
  if (!im.io.joinable()) im.io = std::thread([&im] { im.IoLoop(); });
  const absl::Time end = absl::Now() + deadline;
  while (im.joined_count < im.frags.size()) {
    if (std::string fatal = im.shared.fatal(); !fatal.empty())
      return absl::FailedPreconditionError(fatal);
    if (absl::Now() >= end) {
      return absl::DeadlineExceededError(
          absl::StrCat("sync: joined ", im.joined_count, " of ", im.frags.size(),
                       " fragments before the deadline; are all shards up (",
                       absl::StrJoin(im.opt.servers, ","), ")? Still trying in the background"));
    }
    for (auto& a : im.shared.TakeArrivals(absl::Milliseconds(20))) im.Process(Whole(params), a);
  }
  return absl::OkStatus();
}

absl::Status SyncClient::Drain(std::span<float> params, absl::Duration timeout) {
  Impl& im = *impl_;
  absl::Time end = absl::Now() + timeout;
  for (;;) {
    auto d =
        im.shared.AwaitDrain(absl::Now() < end ? absl::Milliseconds(20) : absl::ZeroDuration());
    if (d.pending < d.pending_before) end = absl::Now() + timeout;  // an answer: still serving
    for (auto& a : d.arrivals) im.Process(Whole(params), a);
    if (d.pending == 0 || absl::Now() >= end) {
      im.drained = true;
      if (d.pending == 0) return absl::OkStatus();
      return absl::DeadlineExceededError(
          absl::StrCat("sync: ", d.pending, " pushes still unanswered at exit"));
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
      shared.QueueInit(a.fragment, std::move(bytes));
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
    shared.QueuePull(a.fragment, a.answers_push);
    return;
  }
  const bool was_outstanding = f.outstanding;
  if (a.answers_push) f.outstanding = false;
  if (!newer) {  // nothing newer than what we have
    if (!f.outstanding) f.delta_taken = false;
    return;
  }
  // The answer to a push that stayed unanswered for many versions (its Applied update lost to a
  // shard fault, found by a pull much later): the local steps since the push were taken on a
  // global model that has long moved on, and kept they would go out in the next push as one
  // delta weighted by all their tokens. They are dropped instead: the fragment takes the global
  // values as they are and counts afresh.
  const bool too_late = a.answers_push && a.version > f.pushed_base + opt.keep_max_gap;
  const bool keep = f.joined && opt.adopt == SyncOptions::Adopt::kKeep && !too_late;
  const float alpha = f.joined && !too_late ? opt.adopt_alpha : 0.0f;
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
  if (mismatch) shared.QueuePull(a.fragment, false);
  const double ms = a.answers_push && a.pushed != absl::InfinitePast()
                        ? absl::ToDoubleMilliseconds(absl::Now() - a.pushed)
                        : -1;
  shared.Update([&](SyncStats& s) {
    if (mismatch) ++s.download_mismatches;
    ++(chain ? s.updates_delta : s.updates_full);
    if (ms >= 0) {
      s.push_to_adopt_ms = Ema(s.push_to_adopt_ms, ms, 0.1);
      s.push_to_adopt_max_ms = std::max(s.push_to_adopt_max_ms, ms);
      auto& recent = s.recent_push_to_adopt_ms;
      if (recent.size() == SyncStats::kRecentLatencies) recent.erase(recent.begin());
      recent.push_back(ms);
    }
    s.versions[a.fragment] = f.version;
    s.joined = joined_count;
    ++s.adoptions;
  });
}

void SyncClient::Impl::AwaitAnswers(SyncClient::ParamsFn params,
                                    const std::vector<uint32_t>& fragments) {
  const absl::Time end = absl::Now() + opt.lockstep_timeout;
  auto pending = [&] {
    for (uint32_t id : fragments)
      if (frags[id].outstanding) return true;
    return false;
  };
  while (pending() && absl::Now() < end && !stop)
    for (auto& a : shared.TakeArrivals(absl::Milliseconds(20))) Process(params, a);
}

void SyncClient::AfterStep(std::span<float> params, uint64_t tokens, absl::Duration step_time) {
  AfterStep(Whole(params), tokens, step_time);
}

void SyncClient::AfterStep(ParamsFn params, uint64_t tokens, absl::Duration step_time) {
  const absl::Time t0 = absl::Now();
  Impl& im = *impl_;
  const double step_us = Ema(static_cast<double>(im.shared.step_time_us()),
                             absl::ToDoubleMicroseconds(step_time), 0.1);
  im.shared.set_step_time_us(static_cast<uint64_t>(step_us));
  for (auto& a : im.shared.TakeArrivals()) im.Process(params, a);
  const bool draining = im.shared.draining();  // set by Drain, on this thread
  // Dynamic Local Updates: a slower worker takes fewer inner steps per push.
  uint32_t h = im.opt.inner_steps;
  const double fleet = static_cast<double>(im.shared.fleet_step_time_us());
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
    job.base_version = f.pushed_base = f.version;
    job.tokens = std::max<uint64_t>(f.tokens, 1);
    job.steps = static_cast<uint32_t>(std::max<int64_t>(f.steps, 1));
    due.push_back(std::move(job));
    if (im.opt.adopt == SyncOptions::Adopt::kKeep) {  // the next push counts from this one
      f.steps = 0;
      f.tokens = 0;
    }
  }
  const double cost_us = absl::ToDoubleMicroseconds(absl::Now() - t0);
  im.shared.Update([&](SyncStats& s) {
    s.inner_steps_now = h;
    s.after_step_us = Ema(s.after_step_us, cost_us, 0.02);
    s.after_step_max_us = std::max(s.after_step_max_us, cost_us);
  });
  std::vector<uint32_t> pushed;
  for (const PushJob& j : due) pushed.push_back(j.fragment);
  im.shared.QueuePushes(std::move(due));
  if (im.opt.lockstep && !pushed.empty()) im.AwaitAnswers(params, pushed);
}

// ---- I/O thread -------------------------------------------------------------------------

// Up to a bounded number of messages from each of the shard's connections, control first (so
// a heartbeat's verdict is never read after the data it would have explained).
void SyncClient::Impl::Receive(uint32_t shard) {
  ZmqShardLink& link = *links[shard];
  ShardSession& session = *sessions[shard];
  for (const bool control : {true, false}) {
    if (control && !link.has_control()) continue;
    for (int budget = 0; budget < 64; ++budget) {
      auto r = link.Receive(control);
      // Chunks of a fragment still arriving are progress too (a join is being answered).
      if (!control && r.arrived) session.DataArrived(r.bytes);
      if (!r.message.ok()) {
        shared.Add(&SyncStats::errors);
        continue;
      }
      if (!r.message->has_value()) break;
      session.OnMessage(**std::move(r.message), control);
    }
  }
}

// What the training thread queued: pulls, theta(0) uploads and due pushes, each to the
// session of its fragment's shard.
void SyncClient::Impl::TakeQueued() {
  SyncShared::Outbox out = shared.TakeOutbox();
  for (const auto& [id, answers] : out.pulls) sessions[plan.fragment(id).shard]->Pull(id, answers);
  for (auto& [id, values] : out.inits)
    sessions[plan.fragment(id).shard]->Init(id, std::move(values));
  for (PushJob& job : out.pushes)
    sessions[plan.fragment(job.fragment).shard]->AddPush(std::move(job));
}

void SyncClient::Impl::IoLoop() {
  for (auto& s : sessions) s->Connect();
  std::vector<zmq::pollitem_t> items;
  while (!stop) {
    items.clear();
    for (const auto& l : links) l->AddPollItems(items);
    try {
      zmq::poll(items.data(), items.size(), std::chrono::milliseconds(5));
    } catch (const zmq::error_t&) {
      continue;
    }
    for (uint32_t s = 0; s < links.size(); ++s) Receive(s);
    TakeQueued();
    uint32_t unacked = 0;
    for (auto& s : sessions) {
      s->Tick(drained);
      unacked += s->unacked();
    }
    shared.Update([&](SyncStats& st) { st.unacked = unacked; });
  }
}

}  // namespace diloco::worker
