// ShardSession, pushes: encoding with error feedback, sending within the shard's credit, the
// copies of each push and their acknowledgements, and giving a refused push up.
#include <algorithm>

#include "kernels/codec_table.h"
#include "worker/push_codec.h"
#include "worker/shard_session.h"
#include "worker/shard_session_internal.h"

namespace diloco::worker {

using session_internal::BytesBefore;
using wire::AckStatus;
using wire::ErrorCode;
using wire::MsgType;

uint64_t ShardSession::PushBytesAhead() const {
  uint64_t bytes = 0;
  for (const auto& [_, job] : unacked_)
    if (job.in_flight && !job.queued && job.push.bytes) bytes += job.push.bytes->size();
  return bytes;
}

void ShardSession::AddPush(PushJob job) {
  FragmentIo& f = frags_.at(job.fragment);
  if (f.error.empty() && !kernels::EntryOf(job.codec).exact)
    f.error.assign(plan_.fragment(job.fragment).numel, 0.0f);  // the first lossy push
  if (!opt_.error_feedback) std::fill(f.error.begin(), f.error.end(), 0.0f);  // e = delta only
  job.push = EncodePush(job.codec, job.delta, f.error, EfDecayFor(job.codec, opt_.ef_decay));
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
  if (!applied)
    UndoErrorFeedback(job.codec, job.delta, frags_.at(job.fragment).error, job.push,
                      EfDecayFor(job.codec, opt_.ef_decay));
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
  h.keyframe_version = job.keyframe_version;
  h.tokens = job.tokens;
  h.steps = job.steps;
  wire::SetPayloadLayout(h, job.codec, f.numel);
  std::shared_ptr<const wire::Bytes> bytes = job.push.bytes;
  Copies& copies = copies_[{job.fragment, job.seq}];
  // The shard holds the push's leading chunks from a lost connection: only the rest go.
  if (auto held = resume_.extract({job.fragment, job.seq})) h.chunk_index = held.mapped();
  if (faults_ && job.fragment == 0 && job.seq == 1 && faults_->lose_push_sends.Take()) {
    // test only (TestFaults::lose_push_sends): lost on the way
    ++copies.unanswered;
    return;
  }
  if (faults_ && job.fragment == 0 && job.seq == 1 && !bytes->empty() &&
      faults_->corrupt_push_sends.Take()) {
    // test only (TestFaults::corrupt_push_sends): a damaged copy
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

}  // namespace diloco::worker
