// One shard as the worker's I/O thread sees it: the connection's state machine (Hello, Welcome,
// a restarted incarnation, liveness and reconnects), the fragments it serves being joined, and
// the pushes to it kept until answered (sent within the shard's credit, resent with the same
// sequence number when they may have been lost, their error feedback undone when they end
// unapplied). Protocol: docs/protocol.md; the worker's side of it: docs/worker.md.
//
// Transport-free and clock-driven: it sends through a SessionTransport (ZeroMQ in
// worker/zmq_shard_link.h, a recorder in tests), reads time only from a Clock, and hands what
// the training thread must see to SyncShared. The I/O thread feeds it what arrives (DataArrived,
// OnMessage), what the training thread queued (AddPush, Pull, Init) and a Tick per pass, so
// tests drive every timer with a fake clock and hand-built messages.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "common/clock.h"
#include "common/faults.h"
#include "common/plan.h"
#include "schema/transport.h"
#include "worker/link_pace.h"
#include "worker/sync_options.h"
#include "worker/sync_shared.h"

namespace diloco::worker {

// A shard's two connections (data; control for heartbeats, so they never queue behind a
// payload on a slow link) as the session uses them.
class SessionTransport {
 public:
  virtual ~SessionTransport() = default;
  // Fresh connections in place of the current ones (the control one only when `control`); a
  // train half-received on an old connection is dropped.
  virtual void Reconnect(bool control) = 0;
  // Sends `h` on the control or the data connection, with `payload` (may be null) cut into the
  // chunks of `codec`'s layout for `numel` values; `checksums`, when not empty, are the chunks'.
  // False: the connection's queue is full and nothing was sent.
  virtual bool Send(bool control, const wire::HeaderFields& h,
                    std::shared_ptr<const wire::Bytes> payload, kernels::Codec codec,
                    uint64_t numel, std::span<const uint64_t> checksums) = 0;
  // A message without a payload.
  bool SendHeader(bool control, const wire::HeaderFields& h) {
    return Send(control, h, nullptr, wire::kFragmentCodec, 0, {});
  }
  // With CURVE: why the shard refused this worker's key, for each connection whose handshake
  // it refused since the last call.
  virtual std::vector<std::string> TakeRefusals() = 0;
  // Whether the data connection was lost since the last call (its peer or the network reset
  // it; the transport reconnects it by itself): the session then reconnects at once.
  virtual bool TakeDisconnected() { return false; }
};

// Who this worker is, as every header says it.
struct WorkerIdentity {
  uint64_t plan_fingerprint = 0, model_fingerprint = 0;
  uint32_t worker_id = 0;
  uint64_t generation = 0;
};

class ShardSession {
 public:
  // Everything passed must outlive the session.
  ShardSession(uint32_t index, std::string endpoint, const SyncOptions& opt, const Plan& plan,
               WorkerIdentity who, const Clock& clock, SessionTransport& transport,
               SyncShared& shared);

  // Opens the connections (again: after a silent shard) and starts over with a Hello.
  void Connect();
  // `bytes` of a message or of a train's chunk crossed the data connection (before OnMessage).
  void DataArrived(uint64_t bytes);
  void OnMessage(wire::Message m, bool via_control);
  // A message from the shard that did not parse (`why`: ParseMessage's status). One of another
  // protocol version stops the worker naming both versions: its fields cannot be read, but its
  // version can (field 0 of every version's header), and no retry changes it. Anything else is
  // only counted (damage; the lost-message paths recover what it was).
  void Unreadable(const absl::Status& why);
  // From the training thread: a due push (encoded here, with this fragment's error feedback),
  // a fragment to pull whole, theta(0) or the fleet's values for a shard that has none.
  void AddPush(PushJob job);
  void Pull(uint32_t fragment, bool answers_push);
  void Init(uint32_t fragment, std::shared_ptr<const wire::Bytes> values);
  // Liveness, Hellos, heartbeats, sending within the credit, resends and join re-asks.
  // `drained`: the client stopped; nothing more is sent or resent.
  void Tick(bool drained);
  // The client is drained and stops: tells the shard this generation leaves (docs/protocol.md,
  // "Leaving"), sent again while unanswered. From now on nothing else is sent: no heartbeat,
  // Hello or reconnect. A shard not welcomed now is not told (it lets the worker time out).
  void Leave();
  // The Leave is over: the shard answered it, refused it (one that does not know the message
  // answers UnknownType), or it was never sent.
  bool leave_done() const { return leave_ != LeaveState::kStaying && leave_ != LeaveState::kSent; }
  // The shard answered the Leave: it no longer counts this worker.
  bool left() const { return leave_ == LeaveState::kLeft; }

  bool welcomed() const { return welcomed_; }
  bool control_welcomed() const { return control_welcomed_; }
  uint32_t unacked() const { return static_cast<uint32_t>(unacked_.size()); }
  bool joined(uint32_t fragment) const { return frags_.at(fragment).joined; }

 private:
  using Kept = std::map<std::pair<uint32_t, uint64_t>, PushJob>;  // (fragment, seq)
  struct FragmentIo {                                             // one of the shard's fragments
    bool joined = false;  // a FragmentUpdate for it has arrived
    // A Duplicate answer: the push was applied before its Applied update got lost, so the
    // update the pull brings is that push's answer (it holds the push's delta).
    bool answer_by_pull = false;
    // A joined fragment's values are asked for (a pull, or after a shard lost them an upload of
    // ours) and have not come. A refusal, a new connection or a restart loses the ask; the next
    // fresh Welcome asks again, so the training thread, which pushes a fragment only once it
    // holds the shard's version, is never left waiting for an answer that will not come.
    // Retry asks again on a live connection too, once the answer could have come (MarkAwaiting).
    bool awaiting = false;
    absl::Time asked = absl::InfinitePast();  // the last ask, a join's or an awaited one's
    absl::Duration interval;                  // doubles with each re-ask (retry_max)
    // The push error feedback residual; empty until the fragment's first lossy push (fp32
    // leaves it zero, push_codec.h).
    std::vector<float> error;
  };

  enum class LeaveState { kStaying, kSent, kLeft, kRefused, kUnsent };
  // A Leave unanswered for this long is sent again (a lost message); Leave is idempotent.
  static constexpr absl::Duration kLeaveResend = absl::Milliseconds(500);

  wire::HeaderFields Header(wire::MsgType t) const;
  void SendLeave();
  void OnLeaveAnswer(const wire::Header& h);
  void SendHello();
  void SendControlHello();
  void SendHeartbeat();
  void SendPull(uint32_t fragment);
  void SendPush(PushJob& job);
  void PumpPushes();
  void AskJoin(uint32_t fragment);
  // A joined fragment's values are asked for now: awaiting, re-asked (Retry) until they come.
  void MarkAwaiting(FragmentIo& f);
  // Asks for a joined fragment's values again: pulled, or uploaded when the shard has none.
  void Resync(uint32_t fragment);
  void CheckHandshakes();
  void OnWelcome(const wire::Header& h);
  // The Welcome's held trains: the pushes whose next send starts at a later chunk (resume_),
  // and the theta(0) uploads that may (init_resume_).
  void ReadHeldTrains(const wire::Header& h);
  void OnPushAck(const wire::Header& h);
  void OnError(const wire::Header& h);
  void OnUpdate(wire::Message m);
  void ReadVersions(const wire::Header& h);
  // Removes a kept push after its final answer; `applied` false undoes its error feedback.
  void Finish(Kept::iterator it, bool applied);
  // A push refused for good: finished unapplied, the fragment released and pulled (or, when the
  // shard has no values for it, ours asked for).
  void GiveUp(Kept::iterator it, wire::ErrorCode code, const std::string& what);
  // Counts one answer (Queued, Duplicate, Stale or an Error naming it) to one copy of the push
  // `key`; true when other copies of it are still unanswered, so that this answer may be an
  // earlier copy's and a later one can still be applied.
  bool OtherCopiesUnanswered(std::pair<uint32_t, uint64_t> key);
  // Sends the push again once it is taken as lost; or gives it up, when a refusal was waiting
  // for copies that are now taken as lost (`it` is then erased).
  void Resend(Kept::iterator it, absl::Time now);
  // Whether a Queued push's Applied answer has been sent: the shard's published version of its
  // fragment (Welcome, Heartbeat, updates) is past the round that holds it. Marks answer_due.
  bool AnswerDue(PushJob& job, absl::Time now) const;
  // How long an ask (a push, a pull) waits for its answer before it is taken as lost: the paced
  // time its answer needs, 4x while the data connection is busy (something arrived within
  // resend_after), at least `interval` (which doubles with each re-ask), at most retry_max.
  absl::Duration OverdueAfter(absl::Duration interval, absl::Duration paced, absl::Time now) const;
  void Retry(absl::Time now);
  // Bytes that may arrive on the data connection before an answer asked for now: the whole
  // fragments the asks of unjoined fragments bring.
  uint64_t JoinBytesAhead() const;
  // Push bytes on the data connection the shard has not taken yet (in flight, not Queued).
  uint64_t PushBytesAhead() const;
  // Bytes that may come down the data connection before an answer about `fragment`: the
  // other fragments' answers (whole, as an upper bound) and joins awaited.
  uint64_t AnswerBytesAhead(uint32_t fragment) const;
  // Whether answers are expected on the data connection (joins or pushes outstanding).
  bool Awaiting() const { return !unacked_.empty() || JoinBytesAhead() > 0; }
  std::string Who() const;

  const uint32_t index_;
  const std::string endpoint_;
  const SyncOptions& opt_;
  const Plan& plan_;
  const WorkerIdentity who_;
  const Clock& clock_;
  SessionTransport& transport_;
  SyncShared& shared_;

  bool welcomed_ = false, control_welcomed_ = false;
  uint64_t incarnation_ = 0;
  // Data connections opened so far, said in each data Hello: the shard binds this worker to no
  // connection older than the newest it has seen a Hello on (protocol.fbs, Header.connection).
  uint32_t connection_ = 0;
  uint64_t credit_bytes_ = 0;  // from Welcome: push bytes in flight at once; 0 = no limit
  absl::Time last_heard_, last_hello_ = absl::InfinitePast();
  absl::Time last_heartbeat_ = absl::InfinitePast(), last_control_hello_ = absl::InfinitePast();
  absl::Time last_data_ = absl::InfinitePast();  // anything, a chunk too, on the data connection
  absl::Duration backoff_ = absl::Milliseconds(100);
  // The data connection's measured rates (worker/link_pace.h): down from what arrives while
  // answers are awaited, up from how fast pushes are taken (their Queued answers).
  LinkPace down_, up_;
  // At most one per fragment of this shard (the training thread's outstanding rule).
  Kept unacked_;
  // Per kept push: how many of its copies (the first send and each resend, same seq) went out
  // on this connection and have no answer yet, and a refusal that arrived while some had none.
  // The shard answers each copy once, in the order it receives them (a train once, however it
  // was cut: docs/protocol.md "Trains"), but an answer does not say which copy it is for: a
  // refusal is final only once no later copy can still be taken and applied. A refusal that
  // waits is final when the copies after it are answered with refusals too, or are taken as
  // lost (their resend wait passes); a Queued, Duplicate or Applied answer supersedes it.
  struct Copies {
    uint32_t unanswered = 0;
    std::optional<std::pair<wire::ErrorCode, std::string>> refusal;
  };
  std::map<std::pair<uint32_t, uint64_t>, Copies> copies_;
  // Kept pushes whose leading chunks the shard holds from a lost connection (its Welcome's
  // held_trains, checked against the push's own chunks): the chunk their next send starts at.
  // Taken by that send; a later send, or one after a refusal (TrainNotHeld), goes whole.
  std::map<std::pair<uint32_t, uint64_t>, uint32_t> resume_;
  // The same for theta(0) uploads (held trains of seq 0): by fragment, the chunks held and the
  // train checksum; Init resumes when its values' chunks hash to it.
  struct HeldInit {
    uint32_t chunks;
    uint64_t train_checksum;
  };
  std::map<uint32_t, HeldInit> init_resume_;
  std::vector<uint32_t> fragments_;        // the shard's, in id order
  std::map<uint32_t, FragmentIo> frags_;   // by fragment id, this shard's only
  std::map<uint32_t, uint64_t> versions_;  // last published version the shard told us
  // Test only: this session's copy of SyncOptions::faults (common/faults.h); null unless a test
  // asked for one.
  std::unique_ptr<TestFaults> faults_;
  LeaveState leave_ = LeaveState::kStaying;
  absl::Time leave_sent_ = absl::InfinitePast();
};

}  // namespace diloco::worker
