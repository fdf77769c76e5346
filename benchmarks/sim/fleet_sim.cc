#include "benchmarks/sim/fleet_sim.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "benchmarks/sim/failure_process.h"
#include "common/ema.h"

namespace diloco::sim {
namespace {

constexpr uint16_t kAll = 0xffff;   // lockstep: every fragment at once
constexpr double kEmaWeight = 0.2;  // server/shard_internal.h's

double Seconds(absl::Time t) { return absl::ToDoubleSeconds(t - absl::UnixEpoch()); }

// Seconds to move `bytes` over a link of `bps` bytes per second (0: unlimited).
double Transfer(double bytes, double bps) { return bps > 0 ? bytes / bps : 0; }

}  // namespace

FleetSim::FleetSim(FleetConfig c)
    : c_(std::move(c)),
      policy_(PolicyOf(c_)),
      timeout_s_(WorkerTimeoutOf(c_)),
      t0_(c_.warmup_s),
      t1_(c_.warmup_s + c_.window_s) {
  const uint32_t n = c_.learners;
  const size_t np = size_t{n} * c_.fragments;
  step_time_.resize(n);
  double rate = 0;
  min_step_time_ = c_.step_time_s * (1 + c_.jitter);
  for (uint32_t l = 0; l < n; ++l) {
    const double u = HashUniform(c_.seed, 2, l, 0);
    step_time_[l] = c_.step_time_s * (1 + c_.jitter * (2 * u - 1));
    min_step_time_ = std::min(min_step_time_, step_time_[l]);
    rate += 1 / step_time_[l];
  }
  r0_ = rate / n;
  gen_.assign(n, 0);
  state_.assign(n, State::kDown);
  live_.assign(n, 0);
  waiting_.assign(n, 0);
  steps_base_.assign(n, 0);
  t_base_.assign(n, 0);
  running_.assign(n, 0);
  s0_.assign(n, 0);
  fail_k_.assign(n, 0);
  sched_i_.assign(n, 0);
  pushed_cut_.assign(np, 0);
  secured_cut_.assign(np, 0);
  last_admit_.assign(np, -1);
  stamp_.assign(np, 0);
  stamp_gen_.assign(np, 0);
  held_version_.assign(np, 0);
  outstanding_.assign(np, 0);
  pending_.assign(np, 0);
  frags_.resize(c_.fragments);
  for (uint32_t p = 0; p < c_.fragments; ++p) frags_[p].shard = p % c_.shards;
  shards_.resize(c_.shards);
}

double FleetSim::StepsAt(uint32_t l, double t) const {
  return running_[l] ? steps_base_[l] + (t - t_base_[l]) / step_time_[l] : steps_base_[l];
}

double FleetSim::TimeAtSteps(uint32_t l, double steps) const {
  return t_base_[l] + (steps - steps_base_[l]) * step_time_[l];
}

SimResult FleetSim::Run() {
  for (uint32_t l = 0; l < c_.learners; ++l) Start(l, 0);
  q_.Push(t0_, Ev::kWindowOpen, 0);
  q_.Push(t1_, Ev::kWindowClose, 0);
  while (!q_.Empty() && !done_) {
    Handle(q_.Pop());
    ++r_.events;
  }
  const double ideal = c_.learners * c_.window_s * r0_;
  r_.mode = c_.mode;
  r_.learners = c_.learners;
  r_.mttf_s = c_.schedule.empty() ? c_.mttf_s : std::numeric_limits<double>::quiet_NaN();
  r_.recovery_s = c_.recovery_s;
  r_.round_s = c_.inner_steps * c_.step_time_s;
  r_.window_s = c_.window_s;
  r_.goodput = useful_ / ideal;
  r_.tokens_rel = tokens_steps_ / c_.fragments / ideal;
  r_.rounds /= c_.fragments;
  r_.round_share = share_n_ ? share_sum_ / share_n_ : 0;
  r_.failures_per_round = r_.failures * r_.round_s / c_.window_s;
  return r_;
}

void FleetSim::Handle(const Event& e) {
  const uint32_t l = e.who;
  switch (e.type) {
    case Ev::kPushDue:
      if (e.gen == gen_[l] && state_[l] == State::kUp) PushDue(l, e.frag, e.t);
      return;
    case Ev::kPushArrive:
      return Arrive(e);
    case Ev::kPushAdmit:
      return Admit(l, e.gen, e.frag, e.t);
    case Ev::kUpdateArrive:
      if (e.gen == gen_[l] && state_[l] == State::kUp) UpdateArrive(l, e.frag, e.t);
      return;
    case Ev::kFail:
      return Fail(l, e.t);
    case Ev::kRestart:
      if (e.gen != gen_[l]) return;
      state_[l] = State::kJoining;
      // The join pulls every fragment whole (fp32).
      q_.Push(e.t + c_.rejoin_s + c_.latency_s + Transfer(4.0 * c_.parameters, c_.bandwidth_Bps),
              Ev::kJoined, l, gen_[l]);
      ScheduleFailure(l, e.t);
      return;
    case Ev::kJoined:
      if (e.gen == gen_[l] && state_[l] == State::kJoining) Start(l, e.t);
      return;
    case Ev::kUnlive:
      if (e.gen != gen_[l] || state_[l] == State::kUp) return;
      SetLive(l, false, e.t);
      for (uint32_t p = 0; p < c_.fragments; ++p) Evaluate(p, T(e.t));
      return;
    case Ev::kDeadline: {
      Fragment& f = frags_[e.who];
      if (f.deadline == absl::InfiniteFuture() || Seconds(f.deadline) != e.t) return;  // stale
      const absl::Time now = f.deadline;  // exactly the deadline ShouldClose was asked about
      f.deadline = absl::InfiniteFuture();
      Evaluate(e.who, now);
      return;
    }
    case Ev::kWindowOpen:
      return OpenWindow(e.t);
    case Ev::kWindowClose:
      return CloseWindow(e.t);
  }
}

void FleetSim::Start(uint32_t l, double t) {
  state_[l] = State::kUp;
  steps_base_[l] = 0;
  t_base_[l] = t;
  running_[l] = 1;
  waiting_[l] = 0;
  s0_[l] = 0;
  for (uint32_t p = 0; p < c_.fragments; ++p) {
    const size_t i = At(l, p);
    pushed_cut_[i] = secured_cut_[i] = 0;
    outstanding_[i] = pending_[i] = 0;
    last_admit_[i] = -1;
    held_version_[i] = frags_[p].version;
  }
  SetLive(l, true, t);
  const double h = c_.inner_steps;
  if (Lockstep(c_)) {
    q_.Push(TimeAtSteps(l, h), Ev::kPushDue, l, gen_[l], kAll);
    return;
  }
  // Streaming (worker/training_sync.cc): fragment i first pushes after (1 + i/P) x H steps.
  for (uint32_t p = 0; p < c_.fragments; ++p) {
    const double offset = static_cast<double>(int64_t{p} * c_.inner_steps / c_.fragments);
    q_.Push(TimeAtSteps(l, h + offset), Ev::kPushDue, l, gen_[l], p);
  }
}

void FleetSim::PushDue(uint32_t l, uint32_t p, double t) {
  if (p == kAll) {  // lockstep: push every fragment and wait for every answer
    steps_base_[l] = StepsAt(l, t);
    t_base_[l] = t;
    running_[l] = 0;
    waiting_[l] = static_cast<uint8_t>(std::min<uint32_t>(c_.fragments, 255));
    for (uint32_t q = 0; q < c_.fragments; ++q) SendPush(l, q, t);
    return;
  }
  // One push of a fragment in flight at a time: a due push waits for the answer, its steps
  // still counting (they go with it).
  if (outstanding_[At(l, p)]) {
    pending_[At(l, p)] = 1;
    return;
  }
  SendPush(l, p, t);
  q_.Push(TimeAtSteps(l, pushed_cut_[At(l, p)] + c_.inner_steps), Ev::kPushDue, l, gen_[l], p);
}

void FleetSim::SendPush(uint32_t l, uint32_t p, double t) {
  const size_t i = At(l, p);
  pushed_cut_[i] = StepsAt(l, t);
  outstanding_[i] = 1;
  if (InWindow(t)) ++r_.pushes;
  const double bytes = c_.push_bytes_per_param * c_.parameters / c_.fragments;
  q_.Push(t + c_.latency_s + Transfer(bytes, c_.bandwidth_Bps), Ev::kPushArrive, l, gen_[l],
          static_cast<uint16_t>(p));
}

void FleetSim::Arrive(const Event& e) {
  if (e.gen != gen_[e.who]) return;  // its learner died while it crossed: lost (counted there)
  if (c_.shard_ingress_Bps <= 0) return Admit(e.who, e.gen, e.frag, e.t);
  ShardTimings& s = shards_[frags_[e.frag].shard];
  const double bytes = c_.push_bytes_per_param * c_.parameters / c_.fragments;
  s.ingress_free = std::max(s.ingress_free, e.t) + bytes / c_.shard_ingress_Bps;
  q_.Push(s.ingress_free, Ev::kPushAdmit, e.who, e.gen, e.frag);
}

void FleetSim::Admit(uint32_t l, uint32_t gen, uint32_t p, double t) {
  if (gen != gen_[l] || state_[l] != State::kUp) return;
  Fragment& f = frags_[p];
  const size_t i = At(l, p);
  // The shard holds one push of a worker generation per fragment in an open round; a restarted
  // learner's push joins the round beside its dead incarnation's and counts towards the quorum
  // as a push of its own (ShardTest.ARestartedWorkersPushJoinsTheRoundHoldingItsDeadProcesssPush).
  const bool in_round = stamp_[i] == f.round_id + 1;
  if (in_round && stamp_gen_[i] == gen) {
    f.deferred.emplace_back(l, gen);
    return;
  }
  const double steps = pushed_cut_[i] - secured_cut_[i];
  const uint32_t isteps = std::max<uint32_t>(1, static_cast<uint32_t>(std::lround(steps)));
  const double w = server::PushWeight(c_.weights, isteps * c_.tokens_per_step, isteps,
                                      f.version - held_version_[i], c_.staleness_alpha);
  if (InWindow(t))
    tokens_steps_ += std::max(0.0, pushed_cut_[i] - std::max(secured_cut_[i], s0_[l]));
  secured_cut_[i] = pushed_cut_[i];
  ShardTimings& s = shards_[f.shard];
  s.inner_steps = Ema(s.inner_steps, steps, kEmaWeight);
  if (last_admit_[i] >= 0) s.cycle_s = Ema(s.cycle_s, t - last_admit_[i], kEmaWeight);
  last_admit_[i] = t;
  if (f.round.pushes == 0) f.round.opened = T(t);
  if (++f.round.pushes == policy_.quorum) {
    f.round.quorum_reached = T(t);
    s.time_to_quorum_s = Ema(s.time_to_quorum_s, t - Seconds(f.round.opened), kEmaWeight);
  }
  f.weight_sum += w;
  stamp_[i] = f.round_id + 1;
  stamp_gen_[i] = gen;
  if (live_[l] && !in_round) ++f.live_in_round;
  f.contributors.emplace_back(l, gen);
  Evaluate(p, T(t));
}

absl::Duration FleetSim::Grace(uint32_t shard) const {
  const ShardTimings& s = shards_[shard];
  server::RoundTimings t;
  t.step_time_s = min_step_time_;
  t.inner_steps = s.inner_steps;
  t.cycle_s = s.cycle_s;
  t.time_to_quorum_s = s.time_to_quorum_s;
  return server::GraceWindow(policy_, t);
}

void FleetSim::Evaluate(uint32_t p, absl::Time now) {
  Fragment& f = frags_[p];
  if (f.round.pushes == 0) return;
  f.round.live_workers_missing = live_count_ - f.live_in_round;
  const absl::Duration grace = Grace(f.shard);
  if (server::ShouldClose(policy_, grace, f.round, now)) return Close(p, Seconds(now));
  const absl::Time d = server::CloseDeadline(policy_, grace, f.round);
  if (d == f.deadline || d == absl::InfiniteFuture()) return;
  f.deadline = d;
  q_.Push(Seconds(d), Ev::kDeadline, p);
}

void FleetSim::Close(uint32_t p, double t) {
  Fragment& f = frags_[p];
  if (InWindow(t)) {
    r_.rounds += 1;
    const double mean_w = f.weight_sum / f.round.pushes;
    share_sum_ += f.weight_sum / (f.weight_sum + f.round.live_workers_missing * mean_w);
    ++share_n_;
  }
  ++f.version;
  ++f.round_id;
  const double arrive =
      t + c_.latency_s +
      Transfer(c_.update_bytes_per_param * c_.parameters / c_.fragments, c_.bandwidth_Bps);
  for (const auto& [l, g] : f.contributors)
    if (g == gen_[l] && state_[l] == State::kUp)
      q_.Push(arrive, Ev::kUpdateArrive, l, g, static_cast<uint16_t>(p));
  f.contributors.clear();
  f.round = server::OpenRound{};
  f.live_in_round = 0;
  f.weight_sum = 0;
  f.deadline = absl::InfiniteFuture();
  auto deferred = std::exchange(f.deferred, {});
  for (const auto& [l, g] : deferred) Admit(l, g, p, t);
}

void FleetSim::UpdateArrive(uint32_t l, uint32_t p, double t) {
  const size_t i = At(l, p);
  outstanding_[i] = 0;
  held_version_[i] = frags_[p].version;
  if (Lockstep(c_)) {
    if (waiting_[l] == 0 || --waiting_[l] > 0) return;
    t_base_[l] = t;  // adopts and trains on
    running_[l] = 1;
    q_.Push(TimeAtSteps(l, steps_base_[l] + c_.inner_steps), Ev::kPushDue, l, gen_[l], kAll);
    return;
  }
  if (!pending_[i]) return;
  pending_[i] = 0;
  SendPush(l, p, t);
  q_.Push(TimeAtSteps(l, pushed_cut_[i] + c_.inner_steps), Ev::kPushDue, l, gen_[l], p);
}

void FleetSim::Fail(uint32_t l, double t) {
  if (state_[l] == State::kDown) return;
  if (InWindow(t)) ++r_.failures;
  if (state_[l] == State::kUp) {
    // The incarnation's useful steps: those of its pushes a shard took (goodput.py: "a killed
    // learner's steps after its last applied push are lost"), the mean over fragments.
    double got = 0;
    for (uint32_t p = 0; p < c_.fragments; ++p) {
      const size_t i = At(l, p);
      got += std::max(0.0, secured_cut_[i] - s0_[l]);
      if (outstanding_[i] && secured_cut_[i] < pushed_cut_[i]) ++r_.lost_pushes;
    }
    useful_ += got / c_.fragments;
  }
  ++gen_[l];
  state_[l] = State::kDown;
  running_[l] = 0;
  if (live_[l] && std::isfinite(timeout_s_)) {
    const double last_seen = t - c_.heartbeat_s * HashUniform(c_.seed, 3, l, gen_[l]);
    q_.Push(std::max(t, last_seen + timeout_s_), Ev::kUnlive, l, gen_[l]);
  }
  q_.Push(t + c_.recovery_s, Ev::kRestart, l, gen_[l]);
}

void FleetSim::SetLive(uint32_t l, bool live, double t) {
  if (static_cast<bool>(live_[l]) == live) return;
  live_[l] = live;
  live ? ++live_count_ : --live_count_;
  for (uint32_t p = 0; p < c_.fragments; ++p) {
    Fragment& f = frags_[p];
    if (stamp_[At(l, p)] == f.round_id + 1) live ? ++f.live_in_round : --f.live_in_round;
  }
}

void FleetSim::ScheduleFailure(uint32_t l, double from) {
  double t;
  if (!c_.schedule.empty()) {
    if (l >= c_.schedule.size() || sched_i_[l] >= c_.schedule[l].size()) return;
    t = std::max(from, t0_ + c_.schedule[l][sched_i_[l]++]);
  } else {
    t = from + TimeToFailure(c_.seed, l, fail_k_[l]++, c_.mttf_s);
  }
  if (t < t1_) q_.Push(t, Ev::kFail, l);
}

void FleetSim::OpenWindow(double t) {
  for (uint32_t l = 0; l < c_.learners; ++l) {
    s0_[l] = state_[l] == State::kUp ? StepsAt(l, t) : 0;
    ScheduleFailure(l, t);
  }
}

void FleetSim::CloseWindow(double t) {
  // Learners still up: every step of theirs in the window counts (goodput.py: "for a learner
  // still up at the end, would" reach a push).
  for (uint32_t l = 0; l < c_.learners; ++l)
    if (state_[l] == State::kUp) useful_ += StepsAt(l, t) - s0_[l];
  done_ = true;
}

}  // namespace diloco::sim
