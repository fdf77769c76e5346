// Shard, identity (server/shard_internal.h): Hello binding a worker's connections, Heartbeat,
// and Leave with the quorum it lowers.
#include "absl/strings/str_cat.h"
#include "server/shard.h"
#include "server/shard_internal.h"

namespace diloco::server {

void Shard::Unbind(const std::string& rid) {
  auto b = bound_.find(rid);
  if (b == bound_.end()) return;
  if (WorkerInfo* w = workers_.Find(b->second.worker)) {
    if (w->rid == rid) w->rid.clear();
    if (w->control_rid == rid) {
      w->control_rid.clear();
      w->answers_on_control = false;
    }
  }
  bound_.erase(b);
  cut_trains_.erase(rid);
}

void Shard::OnHello(const std::string& rid, const wire::Message& m, std::vector<Outgoing>* out) {
  const auto& h = m.header();
  if (auto s = CheckCommon(rid, h, Via::kAnyConnection); !s.ok()) return Refuse(rid, s, &h, out);
  const bool control = h.channel() == wire::Channel::Control;
  if (control) {
    // The heartbeat connection joins a worker already bound on its data connection, in the
    // same generation; it carries nothing that changes state.
    const WorkerInfo* bound = workers_.Find(h.worker_id());
    if (!bound || bound->rid.empty() || bound->generation != h.generation())
      return Refuse(rid,
                    WireError(ErrorCode::BadIdentity,
                              absl::StrCat("worker ", h.worker_id(), " generation ", h.generation(),
                                           " has no data connection here: Hello on it first")),
                    &h, out);
    if (auto b = bound_.find(rid); b != bound_.end() && !b->second.control)
      return Refuse(rid, WireError(ErrorCode::BadIdentity, "this is a data connection"), &h, out);
  }
  WorkerInfo* w = &workers_.Add(h.worker_id());
  if (h.generation() < w->generation)
    return Refuse(rid,
                  WireError(ErrorCode::BadIdentity,
                            absl::StrCat("worker ", h.worker_id(), " generation ", h.generation(),
                                         " is older than ", w->generation)),
                  &h, out);
  if (w->left && h.generation() == w->generation)
    return Refuse(rid,
                  WireError(ErrorCode::BadIdentity,
                            absl::StrCat("worker ", h.worker_id(), " generation ", h.generation(),
                                         " has left: a new start is a new generation")),
                  &h, out);
  if (control) {
    if (w->control_rid != rid) {
      Unbind(w->control_rid);
      Unbind(rid);
    }
    bound_[rid] = {w->id, true};
    w->control_rid = rid;
    w->answers_on_control = h.answers_on_control();
  } else {
    if (h.generation() > w->generation) {  // a restarted worker: a fresh sequence
      w->generation = h.generation();
      w->left = false;  // a worker that left and started again rejoins
      w->applied_seq.clear();
      w->figures.reset();  // the old process's
      dirty_ = true;
      Unbind(w->control_rid);  // the old process's
      w->connection = 0;
    }
    // A Hello from a data connection the worker has since replaced with a newer one: the worker
    // closed it, and what it left queued here is read only now (a shard that took long to
    // recover had its port bound, unread, while the worker gave up on it and reconnected). It
    // must not take the worker from its live connection, whose messages would then be refused.
    if (h.connection() < w->connection) {
      ++counters_.hellos_superseded;
      return Refuse(
          rid,
          WireError(ErrorCode::BadIdentity,
                    absl::StrCat("connection ", h.connection(), " of worker ", h.worker_id(),
                                 " was replaced by its connection ", w->connection)),
          &h, out);
    }
    w->connection = h.connection();
    // A worker id lives on one data connection at a time, a connection serves one worker. A push
    // train the old one left unfinished is kept for the worker to resume here.
    if (w->rid != rid) {
      if (!w->rid.empty()) trains_.Keep(w->rid, w->id, w->generation, clock_->Now());
      Unbind(w->rid);
      Unbind(rid);
    }
    bound_[rid] = {w->id, false};
    w->rid = rid;
  }
  w->last_seen = clock_->Now();
  Outgoing o{rid, Reply(MsgType::Welcome), {}};
  o.header.worker_id = w->id;
  o.header.generation = w->generation;
  o.header.channel = h.channel();
  o.header.credit_bytes = opt_.worker_credit_bytes;
  for (uint32_t id : owned_) o.header.versions.emplace_back(id, fragments_.at(id)->published);
  o.header.fleet_step_time_us = static_cast<uint64_t>(workers_.FleetStepTimeUs(clock_->Now()));
  if (!control) o.header.held_trains = trains_.kept().Held(w->id, w->generation);
  out->push_back(std::move(o));
}

void Shard::OnHeartbeat(const std::string& rid, const wire::Message& m,
                        std::vector<Outgoing>* out) {
  const auto& h = m.header();
  if (auto s = CheckCommon(rid, h, Via::kDataOrControl); !s.ok()) return Refuse(rid, s, &h, out);
  WorkerInfo& w = workers_.Get(h.worker_id());
  if (h.step_time_us() > 0) w.step_time_us = h.step_time_us();
  if (h.figures()) w.figures = wire::ReadLearnerFigures(*h.figures());
  Outgoing o{rid, Reply(MsgType::Heartbeat), {}};
  o.header.worker_id = w.id;
  for (uint32_t id : owned_) o.header.versions.emplace_back(id, fragments_.at(id)->published);
  o.header.fleet_step_time_us = static_cast<uint64_t>(workers_.FleetStepTimeUs(clock_->Now()));
  out->push_back(std::move(o));
}

RoundPolicy Shard::Round() const {
  RoundPolicy p = opt_.round;
  p.quorum =
      QuorumAfterLeaves(p.quorum, static_cast<uint32_t>(workers_.size()), workers_.LeftCount());
  return p;
}

// Leave (docs/protocol.md, "Leaving"). The worker's pushes already in open rounds stay there and
// are merged; what changes is what the rounds wait for and how a round's share is reckoned: a
// worker that left is not live, so it is neither waited for nor counted as a zero delta, and the
// quorum drops with the fleet. A round whose quorum that reaches counts it reached now.
void Shard::OnLeave(const std::string& rid, const wire::Message& m, std::vector<Outgoing>* out) {
  const auto& h = m.header();
  absl::Status s =
      m.num_payloads() == 0
          ? CheckCommon(rid, h, Via::kDataOrControl)
          : WireError(ErrorCode::Malformed, absl::StrCat("a Leave carries no payload, this one ",
                                                         m.num_payloads(), " frames"));
  if (!s.ok()) {
    ++counters_.leaves_refused;
    return Refuse(rid, s, &h, out);
  }
  WorkerInfo& w = workers_.Get(h.worker_id());
  Outgoing o{rid, Reply(MsgType::Leave), {}};
  o.header.worker_id = w.id;
  o.header.generation = w.generation;
  if (w.left) {
    ++counters_.leaves_repeated;
    out->push_back(std::move(o));
    return;
  }
  const uint32_t before = Round().quorum;
  w.left = true;
  ++counters_.leaves;
  const absl::Time now = clock_->Now();
  const uint32_t quorum = Round().quorum;
  for (auto& [_, f] : fragments_)
    if (f->round.pushes >= quorum && f->round.pushes < before) f->round.quorum_reached = now;
  log_lines_.push_back(absl::StrCat("worker ", w.id, " generation ", w.generation,
                                    " left: live workers ", workers_.LiveCount(now), ", quorum ",
                                    quorum, " (of ", opt_.round.quorum, ")"));
  out->push_back(std::move(o));
}

}  // namespace diloco::server
