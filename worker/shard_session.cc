#include "worker/shard_session.h"

#include <algorithm>
#include <iterator>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/ema.h"
#include "worker/fragment_update.h"
#include "worker/push_codec.h"

namespace diloco::worker {

using wire::AckStatus;
using wire::ErrorCode;
using wire::MsgType;

namespace {

// The payload bytes before chunk h.chunk_index, which a resumed send leaves out.
uint64_t BytesBefore(const wire::HeaderFields& h) {
  if (h.chunk_index == 0) return 0;
  const kernels::Codec codec{static_cast<kernels::CodecKind>(h.codec), h.block, h.topk};
  return wire::PayloadLayout(codec, h.num_elements).chunk(h.chunk_index).byte_offset;
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
      corrupt_sends_left_(opt.test_corrupt_push_sends),
      lose_sends_left_(opt.test_lose_push_sends) {
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
  (void)transport_.SendHeader(control_welcomed_, Header(MsgType::Heartbeat));
  last_heartbeat_ = clock_.Now();
}

void ShardSession::SendPull(uint32_t fragment) {
  if (auto f = frags_.find(fragment); f != frags_.end() && f->second.joined)
    MarkAwaiting(f->second);  // until its update comes (OnUpdate)
  auto h = Header(MsgType::Pull);
  h.fragment_id = fragment;
  (void)transport_.SendHeader(false, h);
}

void ShardSession::Pull(uint32_t fragment, bool answers_push) {
  if (answers_push) frags_.at(fragment).answer_by_pull = true;
  SendPull(fragment);
}

void ShardSession::Init(uint32_t fragment, std::shared_ptr<const wire::Bytes> values) {
  if (!welcomed_) return;  // asked for again after the Welcome
  const Fragment& f = plan_.fragment(fragment);
  auto h = Header(MsgType::InitFragment);
  h.fragment_id = fragment;
  wire::SetPayloadLayout(h, wire::kFragmentCodec, f.numel);
  // An upload a lost connection cut goes on from the chunks the shard kept, if these values are
  // that upload's (no training in between: the same bytes, so the same train checksum).
  std::vector<uint64_t> sums;
  if (auto held = init_resume_.extract(fragment)) {
    for (const zmq::message_t& frame : wire::PayloadFrames(values, wire::kFragmentCodec, f.numel))
      sums.push_back(wire::FrameChecksum(frame));
    if (held.mapped().chunks < sums.size() &&
        wire::TrainChecksum(sums) == held.mapped().train_checksum) {
      h.chunk_index = held.mapped().chunks;
      shared_.Add(&SyncStats::init_resumed);
    }
  }
  const uint64_t bytes = values->size() - BytesBefore(h);
  if (transport_.Send(false, h, std::move(values), wire::kFragmentCodec, f.numel, sums))
    shared_.Add(&SyncStats::init_bytes_sent, bytes);
}

uint64_t ShardSession::JoinBytesAhead() const {
  uint64_t bytes = 0;
  for (const auto& [id, f] : frags_)
    if (!f.joined && f.asked != absl::InfinitePast())
      bytes += plan_.fragment(id).numel * sizeof(float);
  return bytes;
}

uint64_t ShardSession::AnswerBytesAhead(uint32_t fragment) const {
  uint64_t bytes = JoinBytesAhead();
  for (const auto& [key, job] : unacked_)
    if (key.first != fragment && job.in_flight)
      bytes += plan_.fragment(key.first).numel * sizeof(float);
  return bytes;
}

uint64_t ShardSession::PushBytesAhead() const {
  uint64_t bytes = 0;
  for (const auto& [_, job] : unacked_)
    if (job.in_flight && !job.queued && job.push.bytes) bytes += job.push.bytes->size();
  return bytes;
}

// An unjoined fragment: the shard's values if it has some, else ask the training thread for
// ours to upload (compare-and-set on version 0 at the shard: the first upload wins).
void ShardSession::AskJoin(uint32_t fragment) {
  const absl::Time now = clock_.Now();
  if (JoinBytesAhead() == 0) down_.Idle(now);  // the link starts answering now
  frags_.at(fragment).asked = now;
  shared_.Add(&SyncStats::join_asks);
  auto it = versions_.find(fragment);
  if (it != versions_.end() && it->second == 0) {
    shared_.Deliver({Arrival::kNeedInit, fragment, 0, false, std::nullopt});
  } else {
    SendPull(fragment);
  }
}

void ShardSession::MarkAwaiting(FragmentIo& f) {
  if (!f.awaiting) f.interval = opt_.resend_after;  // a new ask: its re-asks start afresh
  f.awaiting = true;
  f.asked = clock_.Now();
}

void ShardSession::Resync(uint32_t fragment) {
  MarkAwaiting(frags_.at(fragment));
  if (versions_[fragment] == 0) {
    shared_.Deliver({Arrival::kNeedInit, fragment, 0, false, std::nullopt});
  } else {
    SendPull(fragment);
  }
}

void ShardSession::AddPush(PushJob job) {
  FragmentIo& f = frags_.at(job.fragment);
  if (f.error.empty() && job.codec.kind != kernels::CodecKind::kFp32)
    f.error.assign(plan_.fragment(job.fragment).numel, 0.0f);  // the first lossy push
  if (!opt_.error_feedback) std::fill(f.error.begin(), f.error.end(), 0.0f);  // e = delta only
  job.push = EncodePush(job.codec, job.delta, f.error);
  if (job.push.poisoned) shared_.Add(&SyncStats::errors, job.push.poisoned_chunks);
  job.resend_interval = opt_.resend_after;
  const auto key = std::make_pair(job.fragment, job.seq);
  const PushJob& kept = unacked_[key] = std::move(job);
  shared_.Add(&SyncStats::pushes);
  shared_.Event({SyncEvent::kPush, index_, kept.fragment, kept.seq, kept.base_version, 0, "",
                 kept.steps, kept.tokens, kept.codec});
}

void ShardSession::Finish(Kept::iterator it, bool applied) {
  const PushJob& job = it->second;
  // e was e0 + delta - deQ(q); back to e0, as if the push had never been taken.
  if (!applied) UndoErrorFeedback(job.codec, job.delta, frags_.at(job.fragment).error, job.push);
  copies_.erase(it->first);
  resume_.erase(it->first);
  unacked_.erase(it);
  shared_.PushEnded();
}

bool ShardSession::OtherCopiesUnanswered(std::pair<uint32_t, uint64_t> key) {
  auto c = copies_.find(key);
  if (c == copies_.end()) return false;
  if (c->second.unanswered > 0) --c->second.unanswered;
  return c->second.unanswered > 0;
}

void ShardSession::GiveUp(Kept::iterator it, ErrorCode code, const std::string& what) {
  const uint32_t fragment = it->first.first;
  shared_.Add(&SyncStats::refused);
  shared_.Event(
      {SyncEvent::kRefused, index_, fragment, it->first.second, it->second.base_version, 0, what});
  Finish(it, /*applied=*/false);
  shared_.Deliver({Arrival::kDone, fragment, 0, true, std::nullopt});
  if (code == ErrorCode::NotInitialized) versions_[fragment] = 0;
  Resync(fragment);
}

void ShardSession::SendPush(PushJob& job) {
  const Fragment& f = plan_.fragment(job.fragment);
  const uint64_t ahead = PushBytesAhead();
  if (ahead == 0) up_.Idle(clock_.Now());  // the upload starts now
  // A resend of a push still in flight is among the bytes ahead already.
  job.bytes_ahead = ahead + (job.in_flight && !job.queued ? 0 : job.push.bytes->size());
  job.sent = clock_.Now();
  auto h = Header(MsgType::Push);
  h.fragment_id = job.fragment;
  h.seq = job.seq;
  h.base_version = job.base_version;
  h.tokens = job.tokens;
  h.steps = job.steps;
  wire::SetPayloadLayout(h, job.codec, f.numel);
  std::shared_ptr<const wire::Bytes> bytes = job.push.bytes;
  Copies& copies = copies_[{job.fragment, job.seq}];
  // The shard holds the push's leading chunks from a lost connection: only the rest go.
  if (auto held = resume_.extract({job.fragment, job.seq})) h.chunk_index = held.mapped();
  if (job.fragment == 0 && job.seq == 1 && lose_sends_left_ > 0) {
    --lose_sends_left_;  // test only (SyncOptions::test_lose_push_sends): lost on the way
    ++copies.unanswered;
    return;
  }
  if (job.fragment == 0 && job.seq == 1 && corrupt_sends_left_ > 0 && !bytes->empty()) {
    --corrupt_sends_left_;  // test only (SyncOptions::test_corrupt_push_sends): a damaged copy
    auto damaged = std::make_shared<wire::Bytes>(*bytes);
    damaged->back() ^= 0x01;
    bytes = std::move(damaged);
  }
  job.sent_bytes = job.push.bytes->size() - BytesBefore(h);
  if (transport_.Send(false, h, std::move(bytes), job.codec, f.numel, job.push.checksums)) {
    ++copies.unanswered;
    shared_.Add(&SyncStats::bytes_sent, job.sent_bytes);
  }
}

void ShardSession::PumpPushes() {
  uint64_t in_flight = 0;
  for (const auto& [_, job] : unacked_)
    if (job.in_flight) in_flight += job.push.bytes->size();
  const absl::Time now = clock_.Now();
  for (auto& [_, job] : unacked_) {
    if (job.in_flight || now < job.not_before) continue;
    const uint64_t bytes = job.push.bytes->size();
    // One push is always allowed, so a fragment larger than the credit still goes.
    if (credit_bytes_ > 0 && in_flight > 0 && in_flight + bytes > credit_bytes_) return;
    SendPush(job);
    job.in_flight = true;
    in_flight += bytes;
  }
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

void ShardSession::OnPushAck(const wire::Header& h) {
  const auto key = std::make_pair(h.fragment_id(), h.seq());
  switch (h.ack()) {
    case AckStatus::Queued:  // keep it until Applied: a crash before then means resend
      if (auto it = unacked_.find(key); it != unacked_.end()) {
        // A copy is taken: a refusal of another copy no longer ends the push.
        (void)OtherCopiesUnanswered(key);
        copies_[key].refusal.reset();
        if (!it->second.queued && it->second.push.bytes) {
          up_.Arrived(it->second.sent_bytes, clock_.Now(), /*awaiting=*/true);
          shared_.NoteUpload(it->second.sent, clock_.Now(), it->second.sent_bytes);
        }
        it->second.sent = clock_.Now();
        it->second.queued = true;
        it->second.queued_version = h.version();
        it->second.answer_due = absl::InfiniteFuture();
      }
      return;
    case AckStatus::Initialized:
    case AckStatus::AlreadyInitialized:
      if (!frags_.contains(h.fragment_id())) return;
      versions_[h.fragment_id()] = std::max<uint64_t>(h.version(), 1);
      SendPull(h.fragment_id());
      frags_.at(h.fragment_id()).asked = clock_.Now();
      return;
    case AckStatus::Duplicate:
    case AckStatus::Stale: {
      auto it = unacked_.find(key);
      if (it == unacked_.end()) return;
      const bool stale = h.ack() == AckStatus::Stale;
      (void)OtherCopiesUnanswered(key);  // final either way: applied, or never applicable
      const PushJob& job = it->second;
      shared_.Add(stale ? &SyncStats::stale : &SyncStats::duplicates);
      shared_.Event({stale ? SyncEvent::kStale : SyncEvent::kDuplicate, index_, job.fragment,
                     job.seq, job.base_version, h.version(), ""});
      Finish(it, /*applied=*/!stale);  // a duplicate was applied before its ack got lost
      if (stale) {
        shared_.Deliver({Arrival::kDone, h.fragment_id(), 0, true, std::nullopt});
      } else {
        frags_.at(h.fragment_id()).answer_by_pull = true;  // outstanding until the pull's update
      }
      SendPull(h.fragment_id());
      return;
    }
    default:
      return;
  }
}

void ShardSession::Unreadable(const absl::Status& why) {
  if (wire::ErrorCodeOf(why) == ErrorCode::BadProtocolVersion)
    shared_.Fatal(absl::StrCat(Who(), " answers in another protocol (", why.message(),
                               "): upgrade the worker or the shard so both speak one version"));
}

void ShardSession::OnError(const wire::Header& h) {
  const ErrorCode code = h.error_code();
  const std::string what = h.message() ? h.message()->str() : "";
  shared_.Add(&SyncStats::errors);
  // The Leave refused: by a shard that does not know the message (its header did not parse
  // there, so the refusal names no type), or one that no longer binds this worker. Either way
  // nothing more is to be done: such a shard lets the worker time out.
  if (leave_ == LeaveState::kSent &&
      (h.refused_type() == MsgType::Leave || code == ErrorCode::UnknownType)) {
    leave_ = LeaveState::kRefused;
    return;
  }
  if (leave_ != LeaveState::kStaying) return;
  // A refused plan, model or protocol, or a refused data-connection Hello (the CURVE allow-list
  // binds this key to another worker id, or a newer process of this worker id is bound): no
  // retry can change it. (A refused control Hello comes on the control connection and is
  // retried after the data Hello.)
  if (code == ErrorCode::WrongPlan || code == ErrorCode::WrongModel ||
      code == ErrorCode::BadProtocolVersion ||
      (code == ErrorCode::BadIdentity && h.refused_type() == MsgType::Hello))
    shared_.Fatal(absl::StrCat(Who(), " refuses this worker: ", what));
  if (code == ErrorCode::BadIdentity) {  // the shard does not know this connection: re-Hello
    welcomed_ = false;
    return;
  }
  const auto key = std::make_pair(h.fragment_id(), h.seq());
  auto it = unacked_.find(key);
  if (code == ErrorCode::BadChecksum && h.refused_type() == MsgType::Invalid) {
    // A header of ours arrived damaged: the shard could trust none of its fields, so this names
    // no message. Whatever it was goes again by the path that recovers a lost one: a push by
    // Resend (never acked Queued, it is sent again once the link's pace says it is lost; the
    // shard's dedup keeps that exactly-once), a pull by Retry, a Hello by Tick's re-Hello.
    return;
  }
  // Every other refusal of a push answers one of its copies.
  const bool others = it != unacked_.end() && OtherCopiesUnanswered(key);
  if (code == ErrorCode::Unavailable) return;  // retried: resend timer, join retry
  if (code == ErrorCode::NoCredit) {  // back in line; sent again once an answer frees credit
    if (it != unacked_.end()) {
      it->second.in_flight = false;
      it->second.not_before = clock_.Now() + absl::Milliseconds(200);
    }
    return;
  }
  if (code == ErrorCode::TrainNotHeld) {  // a resumed send the shard could not continue
    if (it != unacked_.end() && !others) {
      it->second.in_flight = false;  // PumpPushes sends it again, whole
      shared_.Add(&SyncStats::resends);
    }
    return;
  }
  if (code == ErrorCode::BadChecksum && it != unacked_.end() && !it->second.resent_corrupt) {
    it->second.resent_corrupt = true;  // damaged on the way: send the same bytes once more
    it->second.in_flight = false;      // PumpPushes sends it again
    shared_.Add(&SyncStats::resends);
    return;
  }
  if (code == ErrorCode::NotInitialized && frags_.contains(h.fragment_id()))
    versions_[h.fragment_id()] = 0;
  // Any other refusal of a push ends it: release the fragment, undo its error feedback, and
  // pull (a shard that lost the fragment gets our values first). Not while a later copy of the
  // same seq (a resend) has no answer: the refusal may be an earlier copy's, and the later one
  // may still be taken and applied; undoing the error feedback then would count the delta
  // twice, once applied and once again in the next push. It waits for that copy's answer, or
  // for the copy to be taken as lost (Resend).
  if (h.seq() == 0 || it == unacked_.end()) return;
  if (others) {
    copies_[key].refusal.emplace(code, what);
    return;
  }
  GiveUp(it, code, what);
}

void ShardSession::OnUpdate(wire::Message m) {
  const auto& h = m.header();
  if (!frags_.contains(h.fragment_id()) ||
      !CheckFragmentUpdate(m, plan_.fragment(h.fragment_id()).numel).ok()) {
    shared_.Add(&SyncStats::errors);
    return;
  }
  FragmentIo& f = frags_.at(h.fragment_id());
  f.awaiting = false;
  // What comes down a round, for --codec=auto / --inner_steps=auto: updates after the join, and
  // the crossing time of those answering a push the shard took (its Queued answer's arrival plus
  // the time the shard held the push: worker/link_meter.h).
  std::optional<absl::Time> left;
  const bool measure = f.joined;
  f.joined = true;
  versions_[h.fragment_id()] = h.version();
  bool answers = std::exchange(f.answer_by_pull, false);
  absl::Time pushed = absl::InfinitePast();
  if (h.ack() == AckStatus::Applied && h.worker_id() == who_.worker_id &&
      h.generation() == who_.generation) {
    if (auto it = unacked_.find({h.fragment_id(), h.seq()}); it != unacked_.end()) {
      answers = true;
      pushed = it->second.made;
      if (it->second.queued && h.held_us() > 0)
        left = it->second.sent + absl::Microseconds(h.held_us());
      const uint64_t base = it->second.base_version;
      // Rounds other workers closed between this push's base and its own round.
      const uint64_t staleness = wire::Staleness(base, h.version());
      shared_.Update([&](SyncStats& s) {
        ++s.applied;
        s.mean_staleness = Ema(s.mean_staleness, static_cast<double>(staleness), 0.1);
        s.max_staleness = std::max(s.max_staleness, staleness);
      });
      shared_.Event({SyncEvent::kApplied, index_, h.fragment_id(), h.seq(), base, h.version(), ""});
      Finish(it, /*applied=*/true);
    }
  }
  const uint32_t fragment = h.fragment_id();
  const uint64_t version = h.version();
  if (measure)
    shared_.NoteDownload(left, clock_.Now(), m.payload_bytes(), plan_.fragment(fragment).numel);
  shared_.Deliver({Arrival::kUpdate, fragment, version, answers, std::move(m), pushed});
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

void ShardSession::Resend(Kept::iterator it, absl::Time now) {
  PushJob& job = it->second;
  // A push the shard has not taken (no Queued yet) is taken as lost, and sent again, once the
  // push bytes that were ahead of it when it was sent could have gone up at the uplink's
  // measured rate and its Queued answer come down behind the other fragments' answers at the
  // downlink's. While the data connection is busy (something arrived within resend_after) that
  // paced time counts four times over: the shard is alive and working through pushes sent
  // together (at 124M parameters, seconds each), and its pace was measured when it was less
  // busy. Either way the wait is bounded by the link's pace: busy or not, the connection no
  // longer holds a resend back (a lost push was once kept unsent for a minute because other
  // fragments' traffic never let it go quiet, while its fragment trained alone). The wait is at
  // least the push's resend interval, which doubles with each resend, and at most retry_max. A
  // Queued push waits for its round (and, per-round durability, its checkpoint) up to
  // retry_max; once the shard says that round is published, its Applied answer is on the way,
  // and is taken as lost (a message dropped on a live connection) once the update and the
  // answers ahead of it could have come down at the downlink's pace, counted the same way.
  // The resend is then answered Duplicate, which ends the push; before, a lost answer held
  // the fragment's pushes back for retry_max while its steps piled up unsent.
  if (!job.in_flight) return;
  absl::Duration wait = opt_.retry_max;
  absl::Time from = job.sent;
  const bool due = job.queued && AnswerDue(job, now);
  if (!job.queued) {
    wait = OverdueAfter(
        job.resend_interval,
        up_.Wait(job.bytes_ahead, absl::ZeroDuration(), opt_.retry_max) +
            down_.Wait(AnswerBytesAhead(job.fragment), absl::ZeroDuration(), opt_.retry_max),
        now);
  } else if (due) {
    const uint64_t update = plan_.fragment(job.fragment).numel * sizeof(float);
    wait = OverdueAfter(
        job.resend_interval,
        down_.Wait(AnswerBytesAhead(job.fragment) + update, absl::ZeroDuration(), opt_.retry_max),
        now);
    from = std::max(job.sent, job.answer_due);
  }
  if (now - from <= wait) return;
  // A refusal that waited for later copies: they are taken as lost now, so it was the last
  // answer there will be.
  if (auto c = copies_.find(it->first); c != copies_.end() && c->second.refusal) {
    const auto [code, what] = *c->second.refusal;
    GiveUp(it, code, what);
    return;
  }
  SendPush(job);
  if (!job.queued || due) job.resend_interval = std::min(job.resend_interval * 2, opt_.retry_max);
  shared_.Add(&SyncStats::resends);
}

absl::Duration ShardSession::OverdueAfter(absl::Duration interval, absl::Duration paced,
                                          absl::Time now) const {
  const bool busy = now - last_data_ <= opt_.resend_after;
  return std::min(std::max(interval, busy ? 4 * paced : paced), opt_.retry_max);
}

bool ShardSession::AnswerDue(PushJob& job, absl::Time now) const {
  if (job.answer_due != absl::InfiniteFuture()) return true;
  // The push joined the round open when it arrived, published one version after the one its
  // Queued answer named, or two when a closed round was still being written then (per-round
  // durability publishes a round once it is durable).
  const auto v = versions_.find(job.fragment);
  if (v == versions_.end() || v->second < job.queued_version + 2) return false;
  job.answer_due = now;
  return true;
}

void ShardSession::Retry(absl::Time now) {
  for (auto it = unacked_.begin(); it != unacked_.end();) {
    auto next = std::next(it);
    Resend(it, now);  // may erase `it`
    it = next;
  }
  // A joined fragment's ask whose answer has not come (a pull or its update lost on a live
  // connection: a dropped message) is made again once the whole fragment could have come down
  // behind the other answers at the downlink's pace (and, where the shard has no values, our
  // upload of it gone up behind the pushes at the uplink's), 4x while the connection is busy as
  // for a push, at least its interval, which starts at resend_after and doubles up to
  // retry_max. Until it comes the training thread does not push the fragment, so without this a
  // lost pull held the fragment back from the fleet until the next fresh Welcome.
  for (uint32_t id : fragments_) {
    FragmentIo& f = frags_.at(id);
    if (!f.joined || !f.awaiting) continue;
    const uint64_t whole = plan_.fragment(id).numel * sizeof(float);
    const auto v = versions_.find(id);
    const bool upload = v != versions_.end() && v->second == 0;
    const absl::Duration paced =
        down_.Wait(AnswerBytesAhead(id) + whole, absl::ZeroDuration(), opt_.retry_max) +
        (upload ? up_.Wait(PushBytesAhead() + whole, absl::ZeroDuration(), opt_.retry_max)
                : absl::ZeroDuration());
    if (now - f.asked <= OverdueAfter(f.interval, paced, now)) continue;
    const absl::Duration next = std::min(f.interval * 2, opt_.retry_max);
    Resync(id);
    f.interval = next;
    shared_.Add(&SyncStats::reasks);
  }
  // Ask again only after the interval passed with nothing arriving on the data connection: at
  // real sizes and on slow links, the answers to the first asks take longer than join_retry to
  // arrive, and each re-ask costs a whole fragment.
  for (uint32_t id : fragments_) {
    FragmentIo& f = frags_.at(id);
    if (!f.joined && now - std::max(f.asked, last_data_) >
                         down_.Wait(JoinBytesAhead(), f.interval, opt_.retry_max)) {
      AskJoin(id);
      f.interval = std::min(f.interval * 2, opt_.retry_max);
    }
  }
}

}  // namespace diloco::worker
