// ShardSession, a fragment's values: joins, pulls and their re-asks' state, theta(0) uploads
// (Init, resumed where the shard kept chunks), and the FragmentUpdates that answer them.
#include <algorithm>
#include <utility>

#include "common/ema.h"
#include "worker/fragment_update.h"
#include "worker/shard_session.h"
#include "worker/shard_session_internal.h"

namespace diloco::worker {

using session_internal::BytesBefore;
using wire::AckStatus;
using wire::MsgType;

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

}  // namespace diloco::worker
