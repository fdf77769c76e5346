#include "worker/sync_client.h"

#include <algorithm>
#include <thread>
#include <utility>
#include <vector>
#include <zmq.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/clock.h"
#include "common/ema.h"
#include "kernels/codec.h"
#include "worker/link_plan.h"
#include "worker/shard_session.h"
#include "worker/sync_shared.h"
#include "worker/training_sync.h"
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
    case SyncEvent::kReanchor:
      return "reanchor";
    case SyncEvent::kLinkChoice:
      return "link_choice";
  }
  return "unknown";
}

struct SyncClient::Impl {
  SyncOptions opt;
  Plan plan;
  uint64_t model_fp = 0;
  SyncShared shared;

  // Training thread.
  TrainingSync train;
  std::atomic<bool> all_joined{false};
  // --codec=auto / --inner_steps=auto: the choice, made again once a round (steps_since_choice
  // reaching its H).
  std::optional<LinkPlanner> planner;
  uint32_t steps_since_choice = 0;
  // The codec and H of this step's pushes (before DyLU scales H).
  std::pair<kernels::Codec, uint32_t> Cadence(double step_us);
  void Process(SyncClient::ParamsFn params, Arrival& a);
  // Lockstep: processes arrivals until none of `fragments` has a push outstanding.
  void AwaitAnswers(SyncClient::ParamsFn params, const std::vector<uint32_t>& fragments);
  // Lockstep with a fixed overlap (SyncOptions::lockstep_overlap): a push queued at step s is
  // awaited, and its answer adopted, at step s + overlap; an answer that comes earlier waits in
  // `deferred`, so the step of every adoption is fixed whatever the timing.
  struct Awaited {
    uint32_t fragment;
    uint64_t due;
  };
  std::vector<Awaited> awaited;
  std::vector<Arrival> deferred;
  uint64_t steps = 0;
  // Processes `a` now, or defers it when its fragment's push is awaited at a later step.
  void Take(SyncClient::ParamsFn params, Arrival& a);
  // Adopts the answers due at this step (the overlap's await point).
  void AwaitDue(SyncClient::ParamsFn params);

  // I/O thread: one session and one ZeroMQ link per shard.
  std::atomic<bool> stop{false};
  std::atomic<bool> drained{false};  // Drain returned: nothing more is sent (or re-sent)
  // Drained: the sessions send their Leave; how many are over, and how many were answered.
  std::atomic<bool> leave{false};
  std::atomic<uint32_t> leaves_done{0}, leaves_acked{0};
  // Drain's last step: asks the I/O thread to leave every shard, waits for it until `end`.
  void LeaveShards(absl::Time end);
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
        shared(o.num_fragments, static_cast<uint32_t>(o.servers.size()), o.max_events),
        train(opt, plan, shared) {}
};

SyncClient::SyncClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

SyncClient::~SyncClient() {
  impl_->stop = true;
  if (impl_->io.joinable()) impl_->io.join();
}

absl::StatusOr<std::unique_ptr<SyncClient>> SyncClient::Create(const SyncOptions& o,
                                                               const Manifest& manifest) {
  if (o.servers.empty()) return absl::InvalidArgumentError("sync: no servers given");
  if (auto s = Validate(o); !s.ok()) return s;
  auto plan = Plan::Create(manifest, o.num_fragments, static_cast<uint32_t>(o.servers.size()));
  if (!plan.ok()) return plan.status();
  auto impl = std::make_unique<Impl>(o, std::move(*plan), manifest.fingerprint());
  if (o.auto_codec || o.auto_inner_steps) {
    LinkPlanOptions lp;
    lp.codecs = o.auto_codec ? o.auto_codecs : std::vector<kernels::Codec>{o.codec};
    lp.h_min = o.inner_steps;
    lp.h_max = o.auto_inner_steps ? o.inner_steps_max : o.inner_steps;
    lp.margin = o.link_margin;
    std::vector<uint64_t> numels;
    for (const Fragment& f : impl->plan.fragments()) numels.push_back(f.numel);
    impl->planner.emplace(std::move(lp), std::move(numels));
  }
  if (impl->opt.generation == 0)
    impl->opt.generation = static_cast<uint64_t>(absl::ToUnixMicros(absl::Now()));
  const WorkerIdentity who{impl->plan.fingerprint(), impl->model_fp, impl->opt.worker_id,
                           impl->opt.generation};
  for (uint32_t s = 0; s < o.servers.size(); ++s) {
    impl->links.push_back(std::make_unique<ZmqShardLink>(impl->ctx, o.servers[s], impl->opt));
    impl->sessions.push_back(std::make_unique<ShardSession>(
        s, o.servers[s], impl->opt, impl->plan, who, impl->clock, *impl->links[s], impl->shared));
  }
  return std::unique_ptr<SyncClient>(new SyncClient(std::move(impl)));
}

uint64_t SyncClient::plan_fingerprint() const { return impl_->plan.fingerprint(); }
std::span<const float> SyncClient::global_params() const { return impl_->train.anchor(); }
bool SyncClient::joined() const { return impl_->all_joined.load(); }
uint32_t SyncClient::shards_left() const { return impl_->leaves_acked.load(); }

SyncStats SyncClient::stats() const { return impl_->shared.stats(); }
void SyncClient::SetProgress(const Progress& p) {
  wire::LearnerFiguresFields f;
  f.step = p.step;
  f.loss = p.loss;
  f.tokens_per_s = p.tokens_per_s;
  f.utilization = p.utilization;
  f.device = p.device;
  impl_->shared.SetProgress(f);
}
std::vector<SyncEvent> SyncClient::TakeEvents() { return impl_->shared.TakeEvents(); }

absl::Status SyncClient::Join(std::span<float> params, absl::Duration deadline) {
  Impl& im = *impl_;
  if (params.size() != im.plan.total_elements())
    return absl::InvalidArgumentError("sync: parameter buffer does not match the manifest");
  if (!im.io.joinable()) im.io = std::thread([&im] { im.IoLoop(); });
  const absl::Time end = absl::Now() + deadline;
  while (!im.train.all_joined()) {
    if (std::string fatal = im.shared.fatal(); !fatal.empty())
      return absl::FailedPreconditionError(fatal);
    if (absl::Now() >= end) {
      return absl::DeadlineExceededError(
          absl::StrCat("sync: joined ", im.train.joined_count(), " of ", im.plan.fragments().size(),
                       " fragments before the deadline; are all shards up (",
                       absl::StrJoin(im.opt.servers, ","), ")? Still trying in the background"));
    }
    for (auto& a : im.shared.TakeArrivals(absl::Milliseconds(20))) im.Process(Whole(params), a);
  }
  return absl::OkStatus();
}

absl::Status SyncClient::Drain(std::span<float> params, absl::Duration timeout) {
  Impl& im = *impl_;
  im.awaited.clear();
  for (auto& a : std::exchange(im.deferred, {})) im.Process(Whole(params), a);
  absl::Time end = absl::Now() + timeout;
  for (;;) {
    auto d =
        im.shared.AwaitDrain(absl::Now() < end ? absl::Milliseconds(20) : absl::ZeroDuration());
    if (d.pending < d.pending_before) end = absl::Now() + timeout;  // an answer: still serving
    for (auto& a : d.arrivals) im.Process(Whole(params), a);
    if (d.pending == 0 || absl::Now() >= end) {
      im.drained = true;
      im.LeaveShards(absl::Now() + std::min(timeout, kLeaveWait));
      if (d.pending == 0) return absl::OkStatus();
      return absl::DeadlineExceededError(
          absl::StrCat("sync: ", d.pending, " pushes still unanswered at exit"));
    }
  }
}

void SyncClient::Impl::LeaveShards(absl::Time end) {
  if (!io.joinable()) return;  // never joined: no shard knows this worker
  leave = true;
  while (leaves_done.load() < sessions.size() && absl::Now() < end)
    absl::SleepFor(absl::Milliseconds(5));
}

// ---- Training thread --------------------------------------------------------------------

void SyncClient::Impl::Process(SyncClient::ParamsFn params, Arrival& a) {
  train.Process(params, a);
  if (train.all_joined()) all_joined = true;
}

void SyncClient::Impl::AwaitAnswers(SyncClient::ParamsFn params,
                                    const std::vector<uint32_t>& fragments) {
  const absl::Time end = absl::Now() + opt.lockstep_timeout;
  auto pending = [&] {
    for (uint32_t id : fragments)
      if (train.outstanding(id)) return true;
    return false;
  };
  const auto interrupted = [&] { return opt.interrupted && opt.interrupted(); };
  while (pending() && absl::Now() < end && !stop && !interrupted())
    for (auto& a : shared.TakeArrivals(absl::Milliseconds(20))) Take(params, a);
}

void SyncClient::Impl::Take(SyncClient::ParamsFn params, Arrival& a) {
  for (const Awaited& w : awaited)
    if (w.fragment == a.fragment && w.due > steps) {
      deferred.push_back(std::move(a));
      return;
    }
  Process(params, a);
}

void SyncClient::Impl::AwaitDue(SyncClient::ParamsFn params) {
  std::vector<uint32_t> due;
  std::erase_if(awaited, [&](const Awaited& w) {
    if (w.due > steps) return false;
    due.push_back(w.fragment);
    return true;
  });
  if (due.empty()) return;
  std::vector<Arrival> later;
  for (auto& a : deferred) {
    if (std::find(due.begin(), due.end(), a.fragment) != due.end())
      Process(params, a);
    else
      later.push_back(std::move(a));
  }
  deferred = std::move(later);
  AwaitAnswers(params, due);
}

std::pair<kernels::Codec, uint32_t> SyncClient::Impl::Cadence(double step_us) {
  if (!planner) return {opt.codec, opt.inner_steps};
  if (++steps_since_choice >= planner->choice().h) {
    steps_since_choice = 0;
    LinkMeasure m = shared.link();
    m.step_s = step_us * 1e-6;
    const uint32_t h_before = planner->choice().h;
    const bool changed = planner->Update(m);
    const LinkChoice& c = planner->choice();
    if (c.h != h_before) train.Restagger(c.h);
    shared.Update([&](SyncStats& s) {
      s.round_need_s = c.need_s;
      s.round_budget_s = c.budget_s;
      if (changed) ++s.link_choices;
    });
    if (changed) {
      SyncEvent e;
      e.kind = SyncEvent::kLinkChoice;
      e.steps = c.h;
      e.codec = c.codec;
      e.detail = absl::StrFormat(
          "%s: a round moves %.1f s of %.1f s (up %.3g MB/s, down %.3g MB/s, %.3g B/param down, "
          "step %.3g s)",
          Describe(c), c.need_s, c.budget_s, m.up_bytes_per_s * 1e-6, m.down_bytes_per_s * 1e-6,
          m.down_bytes_per_param, m.step_s);
      shared.Event(std::move(e));
    }
  }
  return {planner->choice().codec, planner->choice().h};
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
  ++im.steps;
  for (auto& a : im.shared.TakeArrivals()) im.Take(params, a);
  const bool draining = im.shared.draining();  // set by Drain, on this thread
  // Named, not a structured binding: the lambda below captures it (clang before 16 refuses).
  const auto [chosen_codec, h_link] = im.Cadence(step_us);
  const kernels::Codec codec = chosen_codec;
  // Dynamic Local Updates: a slower worker takes fewer inner steps per push.
  uint32_t h = h_link;
  const double fleet = static_cast<double>(im.shared.fleet_step_time_us());
  if (im.opt.dylu && fleet > 0 && step_us > 0)
    h = std::max<uint32_t>(1, static_cast<uint32_t>(h_link * std::min(1.0, fleet / step_us)));
  std::vector<PushJob> due = im.train.Step(params, tokens, h, codec, draining);
  const double cost_us = absl::ToDoubleMicroseconds(absl::Now() - t0);
  im.shared.Update([&](SyncStats& s) {
    s.inner_steps_now = h;
    s.codec_now = codec;
    s.after_step_us = Ema(s.after_step_us, cost_us, 0.02);
    s.after_step_max_us = std::max(s.after_step_max_us, cost_us);
  });
  std::vector<uint32_t> pushed;
  for (const PushJob& j : due) pushed.push_back(j.fragment);
  im.shared.QueuePushes(std::move(due));
  if (!im.opt.lockstep) return;
  if (im.opt.lockstep_overlap == 0) {
    if (!pushed.empty()) im.AwaitAnswers(params, pushed);
    return;
  }
  for (uint32_t f : pushed) im.awaited.push_back({f, im.steps + im.opt.lockstep_overlap});
  im.AwaitDue(params);
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
        session.Unreadable(r.message.status());
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
    const bool leaving = leave;
    uint32_t unacked = 0, done = 0, acked = 0;
    for (auto& s : sessions) {
      if (leaving) s->Leave();  // once: later calls do nothing
      s->Tick(drained);
      unacked += s->unacked();
      done += s->leave_done();
      acked += s->left();
    }
    leaves_done = done;
    leaves_acked = acked;
    shared.Update([&](SyncStats& st) { st.unacked = unacked; });
  }
}

}  // namespace diloco::worker
