// ShardSession, refusals: what the shard's Error answers and unreadable messages mean for the
// connection, the Leave and each push (fatal, re-Hello, resend, or give the push up).
#include "absl/strings/str_cat.h"
#include "worker/shard_session.h"

namespace diloco::worker {

using wire::ErrorCode;
using wire::MsgType;

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

}  // namespace diloco::worker
