// ShardSession, the connection: construction, the handshakes (Hello, Welcome, a restarted
// incarnation), dispatch of what arrives, liveness and reconnects, and Leave.
#include "worker/shard_session.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace diloco::worker {

using wire::AckStatus;
using wire::ErrorCode;
using wire::MsgType;

namespace {

// This session's own copy of the faults a test asked of `opt`; null when none (a production
// run).
std::unique_ptr<TestFaults> PushFaults(const SyncOptions& opt) {
  return opt.faults ? std::make_unique<TestFaults>(*opt.faults) : nullptr;
}

}  // namespace

ShardSession::ShardSession(uint32_t index, std::string endpoint, const SyncOptions& opt,
                           const Plan& plan, WorkerIdentity who, const Clock& clock,
                           SessionTransport& transport, SyncShared& shared)
    : index_(index),
      endpoint_(std::move(endpoint)),
      opt_(opt),
      plan_(plan),
      who_(who),
      clock_(clock),
      transport_(transport),
      shared_(shared),
      down_(opt.link_rate_floor),
      up_(opt.link_rate_floor),
      fragments_(plan.FragmentsOfShard(index)),
      faults_(PushFaults(opt)) {
  for (uint32_t id : fragments_) {
    FragmentIo& f = frags_[id];
    f.interval = opt.join_retry;
  }
  last_heard_ = clock_.Now();
}

std::string ShardSession::Who() const {
  return absl::StrCat("shard ", index_, " (", endpoint_, ")");
}

wire::HeaderFields ShardSession::Header(MsgType t) const {
  wire::HeaderFields h;
  h.type = t;
  h.plan_fingerprint = who_.plan_fingerprint;
  h.model_fingerprint = who_.model_fingerprint;
  h.worker_id = who_.worker_id;
  h.generation = who_.generation;
  h.step_time_us = shared_.step_time_us();
  return h;
}

// Two connections per shard, each its own TCP stream: a heartbeat on the control one is not
// held behind a fragment that takes longer than the liveness timeout to cross a slow link.
void ShardSession::Connect() {
  transport_.Reconnect(opt_.control_channel);
  ++connection_;
  welcomed_ = control_welcomed_ = false;
  last_heard_ = clock_.Now();
  last_hello_ = last_control_hello_ = absl::InfinitePast();
}

// A shard whose ZAP handler does not list this worker's key refuses every handshake; libzmq
// would retry forever in silence. That is a refusal like a wrong plan: no retry changes it.
void ShardSession::CheckHandshakes() {
  for (const std::string& refusal : transport_.TakeRefusals()) {
    shared_.Add(&SyncStats::errors);
    // Only the shard's ZAP refusal is about this worker's key; a wrong shard key or a keyless
    // side says its own cause (schema/handshake_monitor.h).
    const bool zap = absl::StartsWith(refusal, "the server refused the CURVE handshake");
    shared_.Fatal(
        absl::StrCat(Who(), " refuses this worker: ", refusal,
                     zap ? absl::StrCat("; is this worker's public key ", opt_.curve_public_key,
                                        " listed for worker ", who_.worker_id,
                                        " in the shard's --curve_authorized_keys?")
                         : ""));
  }
}

void ShardSession::SendHello() {
  auto h = Header(MsgType::Hello);
  h.connection = connection_;
  (void)transport_.SendHeader(false, h);
  last_hello_ = clock_.Now();
}

// After the data connection's Welcome: the shard binds a control connection only to a worker
// it already knows in this generation.
void ShardSession::SendControlHello() {
  auto h = Header(MsgType::Hello);
  h.channel = wire::Channel::Control;
  h.answers_on_control = true;  // a push's Queued answer comes here, ahead of the updates
  (void)transport_.SendHeader(true, h);
  last_control_hello_ = clock_.Now();
}

void ShardSession::SendHeartbeat() {
  auto h = Header(MsgType::Heartbeat);
  h.figures = shared_.Figures();
  (void)transport_.SendHeader(control_welcomed_, h);
  last_heartbeat_ = clock_.Now();
}

void ShardSession::ReadVersions(const wire::Header& h) {
  if (h.versions())
    for (const auto* fv : *h.versions())
      if (frags_.contains(fv->id())) versions_[fv->id()] = fv->version();
  if (h.fleet_step_time_us() > 0) shared_.SetFleetStepTime(index_, h.fleet_step_time_us());
}

void ShardSession::OnWelcome(const wire::Header& h) {
  if (h.shard() != index_) {  // same plan, another shard: --servers is out of shard order
    shared_.Add(&SyncStats::errors);
    shared_.Fatal(absl::StrCat("the shard at ", endpoint_, " is shard ", h.shard(),
                               ", but --servers lists it as shard ", index_,
                               ": list the shards' endpoints in shard order (shard 0 first)"));
    return;
  }
  const bool restarted = incarnation_ != 0 && incarnation_ != h.incarnation();
  // A Welcome on a connection already welcomed by the same incarnation only refreshes the
  // versions and the fleet's step time (DyLU's periodic Hello).
  const bool fresh = !welcomed_ || restarted;
  incarnation_ = h.incarnation();
  welcomed_ = true;
  credit_bytes_ = h.credit_bytes();
  backoff_ = absl::Milliseconds(100);
  ReadVersions(h);
  if (!fresh) return;
  ReadHeldTrains(h);
  if (restarted) {
    control_welcomed_ = false;  // the new process has no binding for it
    shared_.Add(&SyncStats::shard_restarts);
    shared_.Event({SyncEvent::kShardRestart, index_, 0, 0, 0, 0, ""});
  }
  // Everything not yet answered goes again with its sequence number: the shard's dedup table
  // keeps it exactly-once. A fragment the shard has no values for cannot take it.
  for (auto it = unacked_.begin(); it != unacked_.end();) {
    auto next = std::next(it);
    if (versions_[it->first.first] == 0) {
      const uint32_t fragment = it->first.first;
      Finish(it, /*applied=*/false);
      shared_.Deliver({Arrival::kDone, fragment, 0, true, std::nullopt});
    } else if (it->second.in_flight) {
      // Answers to copies sent on the old connection never come back on this one: the copy
      // sent now is the one whose answer decides.
      copies_.erase(it->first);
      it->second.in_flight = false;  // counted afresh against the (new) credit
      it->second.queued = false;
      it->second.answer_due = absl::InfiniteFuture();
      it->second.resend_interval = opt_.resend_after;
      shared_.Add(&SyncStats::resends);
    }
    it = next;
  }
  PumpPushes();
  for (uint32_t id : fragments_) {
    FragmentIo& f = frags_.at(id);
    if (!f.joined) {
      f.interval = opt_.join_retry;
      AskJoin(id);
      continue;
    }
    // The shard may have gone back to an older checkpoint (periodic durability), or lost
    // everything: take its versions as they are, or give it the fleet's last values.
    if (restarted) shared_.Deliver({Arrival::kReset, id, 0, false, std::nullopt});
    // An ask that a refusal, the old connection or the old process left unanswered is made
    // again on this one (docs/worker.md, "Faults").
    if (restarted || f.awaiting) Resync(id);
  }
}

// A push the shard holds the leading chunks of goes on from the first it lacks, if those chunks
// are this push's: the same seq, fewer chunks than the push has, and the same train checksum
// (the hash of every chunk's checksum, so the shard's chunks and ours are one payload; the shard
// checks it again when the train is complete).
void ShardSession::ReadHeldTrains(const wire::Header& h) {
  resume_.clear();
  init_resume_.clear();
  if (!h.held_trains()) return;
  for (const wire::HeldTrain* t : *h.held_trains()) {
    if (t->seq() == 0) {  // a theta(0) upload: checked against its values when they are sent
      if (t->chunks() > 0) init_resume_[t->fragment_id()] = {t->chunks(), t->train_checksum()};
      continue;
    }
    auto it = unacked_.find({t->fragment_id(), t->seq()});
    if (it == unacked_.end() || !it->second.push.bytes) continue;
    const std::vector<uint64_t>& sums = it->second.push.checksums;
    if (t->chunks() == 0 || t->chunks() >= sums.size() ||
        wire::TrainChecksum(sums) != t->train_checksum())
      continue;
    resume_[it->first] = t->chunks();
  }
}

void ShardSession::DataArrived(uint64_t bytes) {
  const absl::Time now = clock_.Now();
  down_.Arrived(bytes, now, Awaiting());
  last_data_ = now;
}

void ShardSession::OnMessage(wire::Message m, bool via_control) {
  const auto& h = m.header();
  last_heard_ = clock_.Now();
  shared_.Add(&SyncStats::bytes_received, m.payload_bytes());
  if (via_control) {  // Welcome, Heartbeat, a refusal of either, and pushes' Queued answers
    if (h.type() == MsgType::Error && h.error_code() == ErrorCode::BadIdentity)
      control_welcomed_ = false;  // e.g. the shard restarted: Hello again after the data Hello
    if (h.plan_fingerprint() != who_.plan_fingerprint) return;
    if (h.type() == MsgType::PushAck && h.ack() == AckStatus::Queued) return OnPushAck(h);
    if (h.type() == MsgType::Welcome && h.channel() == wire::Channel::Control &&
        h.incarnation() == incarnation_)
      control_welcomed_ = true;
    if (h.type() == MsgType::Welcome || h.type() == MsgType::Heartbeat) ReadVersions(h);
    return;
  }
  if (h.type() == MsgType::Error) return OnError(h);  // may name the shard's own plan
  if (h.plan_fingerprint() != who_.plan_fingerprint) {
    shared_.Add(&SyncStats::errors);
    return;
  }
  switch (h.type()) {
    case MsgType::Welcome:
      return OnWelcome(h);
    case MsgType::PushAck:
      return OnPushAck(h);
    case MsgType::FragmentUpdate:
      return OnUpdate(std::move(m));
    case MsgType::Heartbeat:
      return ReadVersions(h);
    case MsgType::Leave:
      return OnLeaveAnswer(h);
    default:
      return;
  }
}

void ShardSession::Leave() {
  if (leave_ != LeaveState::kStaying) return;
  if (!welcomed_) {
    leave_ = LeaveState::kUnsent;
    return;
  }
  SendLeave();
}

void ShardSession::SendLeave() {
  (void)transport_.SendHeader(false, Header(MsgType::Leave));
  leave_ = LeaveState::kSent;
  leave_sent_ = clock_.Now();
}

void ShardSession::OnLeaveAnswer(const wire::Header& h) {
  if (leave_ == LeaveState::kSent && h.worker_id() == who_.worker_id &&
      h.generation() == who_.generation)
    leave_ = LeaveState::kLeft;
}

void ShardSession::Tick(bool drained) {
  const absl::Time now = clock_.Now();
  if (leave_ != LeaveState::kStaying) {
    if (leave_ == LeaveState::kSent && now - leave_sent_ > kLeaveResend) SendLeave();
    return;
  }
  const bool control = opt_.control_channel;
  if (!welcomed_ || (control && !control_welcomed_)) CheckHandshakes();
  if (transport_.TakeDisconnected() && welcomed_) {
    // The data connection was lost: what went since went nowhere, and the shard sees a new
    // connection. Fresh ones now, so that the Hello, and the Welcome with the chunks the shard
    // kept of a push that was under way, come before anything is sent again.
    Connect();
    shared_.Add(&SyncStats::reconnects);
  }
  if (now - last_heard_ > opt_.shard_timeout) {
    // Silent shard: new connections, back off exponentially. Training goes on meanwhile.
    Connect();
    backoff_ = std::min(backoff_ * 2, opt_.backoff_max);
    last_heard_ = now + backoff_;  // give the reconnect time before judging again
    shared_.Add(&SyncStats::reconnects);
  }
  if (!welcomed_ && now - last_hello_ > backoff_) SendHello();
  if (welcomed_ && opt_.dylu && now - last_hello_ > opt_.fleet_refresh) SendHello();
  if (welcomed_ && control && !control_welcomed_ && now - last_control_hello_ > backoff_)
    SendControlHello();
  if (welcomed_ && now - last_heartbeat_ > opt_.heartbeat) SendHeartbeat();
  if (welcomed_ && !drained) {
    PumpPushes();
    Retry(now);
  }
}

}  // namespace diloco::worker
