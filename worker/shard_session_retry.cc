// ShardSession, lost messages: when an unanswered push is resent and an unanswered ask made
// again, timed by the link's measured pace (worker/link_pace.h).
#include <algorithm>
#include <iterator>

#include "worker/shard_session.h"

namespace diloco::worker {

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
