// The worker's per-shard session alone: no sockets, no threads, a fake clock. A recording
// transport stands in for ZeroMQ and hand-built messages for the shard, so every timer (Hello
// backoff, liveness, resends, join re-asks, credit) is driven step by step.
#include "worker/shard_session.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "tests/worker/recording_transport.h"
#include "worker/model/gpt/gpt_config.h"
#include "worker/sync_shared.h"

namespace diloco::worker {
namespace {

using wire::AckStatus;
using wire::ErrorCode;
using wire::MsgType;

class ShardSessionTest : public ::testing::Test {
 protected:
  ShardSessionTest()
      : manifest_(*GptManifest(GptConfig{16, 4, 1, 1, 4})),
        plan_(*Plan::Create(manifest_, /*num_fragments=*/2, /*num_shards=*/1)),
        shared_(2, 1, 64) {
    opt_.servers = {"tcp://127.0.0.1:9"};
    opt_.num_fragments = 2;
    opt_.codec = {kernels::CodecKind::kInt8, 64};
    // The timers under test run for minutes of fake time; the shard is silent throughout, so
    // liveness is set apart (the liveness test sets it back).
    opt_.shard_timeout = absl::Hours(1);
    for (uint32_t f = 0; f < 2; ++f) {
      deltas_[f].assign(plan_.fragment(f).numel, 0.0f);
      // Values an int8 grid cannot hold exactly: every push leaves an error behind.
      for (size_t i = 0; i < deltas_[f].size(); ++i)
        deltas_[f][i] = 1e-3f * static_cast<float>((i * 7919 + f) % 113) / 37.0f;
    }
  }

  void Start() {
    who_ = {plan_.fingerprint(), manifest_.fingerprint(), 5, 99};
    session_ = std::make_unique<ShardSession>(0, opt_.servers[0], opt_, plan_, who_, clock_,
                                              transport_, shared_);
    session_->Connect();
  }

  wire::HeaderFields FromShard(MsgType t) const { return ShardHeader(t, plan_, manifest_, who_); }

  static wire::Message Parse(const wire::HeaderFields& h,
                             std::shared_ptr<const wire::Bytes> payload = nullptr) {
    auto m = BuildMessage(h, std::move(payload));
    EXPECT_TRUE(m.ok()) << m.status();
    return std::move(*m);
  }

  void Welcome(uint64_t incarnation, std::vector<uint64_t> versions, uint64_t credit = 0,
               uint32_t shard = 0) {
    auto h = FromShard(MsgType::Welcome);
    h.shard = shard;
    h.incarnation = incarnation;
    h.credit_bytes = credit;
    for (uint32_t f = 0; f < versions.size(); ++f) h.versions.emplace_back(f, versions[f]);
    session_->OnMessage(Parse(h), /*via_control=*/false);
  }

  // Fragment `f` whole at `version`; with `seq`, the Applied answer to this worker's push.
  void Update(uint32_t f, uint64_t version, uint64_t seq = 0) {
    auto h = FromShard(MsgType::FragmentUpdate);
    h.fragment_id = f;
    h.version = version;
    if (seq > 0) {
      h.seq = seq;
      h.ack = AckStatus::Applied;
    }
    const uint64_t numel = plan_.fragment(f).numel;
    wire::SetPayloadLayout(h, wire::kFragmentCodec, numel);
    session_->OnMessage(Parse(h, std::make_shared<wire::Bytes>(numel * 4, 0)), false);
  }

  void Ack(uint32_t f, uint64_t seq, AckStatus status, uint64_t version = 0,
           bool via_control = false) {
    auto h = FromShard(MsgType::PushAck);
    h.fragment_id = f;
    h.seq = seq;
    h.ack = status;
    h.version = version;
    session_->OnMessage(Parse(h), via_control);
  }

  void Refuse(uint32_t f, uint64_t seq, ErrorCode code, MsgType refused = MsgType::Push) {
    auto h = FromShard(MsgType::Error);
    h.fragment_id = f;
    h.seq = seq;
    h.error_code = code;
    h.refused_type = refused;
    h.message = "refused by the test";
    session_->OnMessage(Parse(h), false);
  }

  void Push(uint32_t f, uint64_t seq, uint64_t base = 1) {
    PushJob job;
    job.codec = opt_.codec;
    job.fragment = f;
    job.delta = deltas_[f];
    job.seq = seq;
    job.base_version = base;
    job.tokens = 10;
    job.steps = 1;
    session_->AddPush(std::move(job));
  }

  // Welcomed and joined at version 1 of both fragments, nothing left to send.
  void Joined() {
    Start();
    session_->Tick(false);
    Welcome(7, {1, 1});
    Update(0, 1);
    Update(1, 1);
    transport_.sent.clear();
    (void)shared_.TakeArrivals();
  }

  // Joined, then fragment 0's push seq 1 sent, unanswered, and sent again by the lost-push
  // resend: the copies the answer-matching tests refuse one by one. Returns the first copy, for
  // comparing the bytes of a later push with it.
  Sent PushThenItsResend() {
    Joined();
    Push(0, 1);
    session_->Tick(false);
    auto first = transport_.Take(MsgType::Push);
    EXPECT_EQ(first.size(), 1u);
    clock_.Advance(opt_.resend_after + absl::Milliseconds(1));
    session_->Tick(false);
    EXPECT_EQ(transport_.Take(MsgType::Push).size(), 1u) << "the lost-push resend, same seq";
    return first.empty() ? Sent{} : std::move(first[0]);
  }

  // What the session sends of type `t` on its first Tick after `d` more has passed.
  std::vector<Sent> SentAfter(absl::Duration d, MsgType t) {
    clock_.Advance(d);
    session_->Tick(false);
    return transport_.Take(t);
  }

  std::vector<Arrival::Kind> Arrivals() {
    std::vector<Arrival::Kind> kinds;
    for (const Arrival& a : shared_.TakeArrivals()) kinds.push_back(a.kind);
    return kinds;
  }

  Manifest manifest_;
  Plan plan_;
  SyncOptions opt_;
  SyncShared shared_;
  FakeClock clock_;
  RecordingTransport transport_;
  std::vector<float> deltas_[2];
  WorkerIdentity who_;
  std::unique_ptr<ShardSession> session_;
};

TEST_F(ShardSessionTest, HelloIsRepeatedAfterItsBackoffUntilAWelcomeThenEveryFragmentIsPulled) {
  Start();
  EXPECT_EQ(transport_.reconnects, 1);
  EXPECT_TRUE(transport_.reconnected_control);
  session_->Tick(false);
  const auto first = transport_.Take(MsgType::Hello);
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0].h.connection, 1u);
  clock_.Advance(absl::Milliseconds(50));
  session_->Tick(false);
  EXPECT_TRUE(transport_.Take(MsgType::Hello).empty()) << "again before the backoff";
  clock_.Advance(absl::Milliseconds(60));
  session_->Tick(false);
  EXPECT_EQ(transport_.Take(MsgType::Hello).size(), 1u);

  Welcome(7, {3, 3});
  EXPECT_TRUE(session_->welcomed());
  const auto pulls = transport_.Take(MsgType::Pull);
  ASSERT_EQ(pulls.size(), 2u);
  EXPECT_EQ(pulls[0].h.fragment_id, 0u);
  EXPECT_EQ(pulls[1].h.fragment_id, 1u);
  EXPECT_EQ(shared_.stats().join_asks, 2u);
  // The control connection is bound after the data one's Welcome, and carries no data.
  session_->Tick(false);
  const auto hellos = transport_.Take(MsgType::Hello);
  ASSERT_EQ(hellos.size(), 1u);
  EXPECT_TRUE(hellos[0].control);
  EXPECT_EQ(hellos[0].h.channel, wire::Channel::Control);

  Update(0, 3);
  Update(1, 3);
  EXPECT_TRUE(session_->joined(0));
  EXPECT_TRUE(session_->joined(1));
  EXPECT_EQ(Arrivals(), (std::vector<Arrival::Kind>{Arrival::kUpdate, Arrival::kUpdate}));
}

TEST_F(ShardSessionTest, AFragmentTheShardHasNoValuesForIsUploadedFromTheTrainingThread) {
  Start();
  session_->Tick(false);
  Welcome(7, {0, 3});
  EXPECT_EQ(Arrivals(), std::vector<Arrival::Kind>{Arrival::kNeedInit});
  const auto pulls = transport_.Take(MsgType::Pull);
  ASSERT_EQ(pulls.size(), 1u);
  EXPECT_EQ(pulls[0].h.fragment_id, 1u);

  const uint64_t numel = plan_.fragment(0).numel;
  session_->Init(0, std::make_shared<wire::Bytes>(numel * 4, 0));
  const auto inits = transport_.Take(MsgType::InitFragment);
  ASSERT_EQ(inits.size(), 1u);
  EXPECT_EQ(inits[0].payload->size(), numel * 4);
  EXPECT_EQ(inits[0].h.num_elements, numel);

  Ack(0, 0, AckStatus::AlreadyInitialized, 1);  // another worker's upload won: take its values
  ASSERT_EQ(transport_.Take(MsgType::Pull).size(), 1u);
}

TEST_F(ShardSessionTest, ASilentShardGetsNewConnectionsAndAFreshHello) {
  opt_.shard_timeout = absl::Seconds(3);
  Joined();
  clock_.Advance(absl::Seconds(2));
  session_->Tick(false);
  EXPECT_EQ(transport_.reconnects, 1) << "reconnected before the timeout";
  transport_.sent.clear();
  clock_.Advance(absl::Seconds(1) + absl::Milliseconds(1));
  session_->Tick(false);
  EXPECT_EQ(transport_.reconnects, 2);
  EXPECT_EQ(shared_.stats().reconnects, 1u);
  const auto hellos = transport_.Take(MsgType::Hello);
  ASSERT_EQ(hellos.size(), 1u);
  // The second data connection says so: the shard binds the worker to no older one.
  EXPECT_EQ(hellos[0].h.connection, 2u);
  EXPECT_FALSE(session_->welcomed());
  // The new connections get the timeout plus the doubled backoff (200 ms) before the next
  // judgement, and Hellos follow at that backoff.
  clock_.Advance(absl::Seconds(3));
  session_->Tick(false);
  EXPECT_EQ(transport_.reconnects, 2);
  EXPECT_EQ(transport_.Take(MsgType::Hello).size(), 1u);
  clock_.Advance(absl::Milliseconds(250));
  session_->Tick(false);
  EXPECT_EQ(transport_.reconnects, 3);
}

TEST_F(ShardSessionTest, HeartbeatsMoveToTheControlConnectionOnceItIsBound) {
  Joined();
  clock_.Advance(opt_.heartbeat + absl::Milliseconds(1));
  session_->Tick(false);
  auto beats = transport_.Take(MsgType::Heartbeat);
  ASSERT_EQ(beats.size(), 1u);
  EXPECT_FALSE(beats[0].control);

  auto h = FromShard(MsgType::Welcome);
  h.channel = wire::Channel::Control;
  h.incarnation = 7;
  session_->OnMessage(Parse(h), /*via_control=*/true);
  EXPECT_TRUE(session_->control_welcomed());
  clock_.Advance(opt_.heartbeat + absl::Milliseconds(1));
  session_->Tick(false);
  beats = transport_.Take(MsgType::Heartbeat);
  ASSERT_EQ(beats.size(), 1u);
  EXPECT_TRUE(beats[0].control);
}

// The control Hello says the worker takes Queued answers there, and one that comes there is taken
// like one on the data connection: the push waits for its round instead of being resent. Other
// answers are not taken on the control connection.
TEST_F(ShardSessionTest, AQueuedAnswerOnTheControlConnectionIsTaken) {
  Joined();
  clock_.Advance(opt_.heartbeat + absl::Milliseconds(1));
  session_->Tick(false);
  auto hellos = transport_.Take(MsgType::Hello);
  ASSERT_FALSE(hellos.empty());
  bool asked = false;
  for (const auto& m : hellos) asked |= m.control && m.h.answers_on_control;
  EXPECT_TRUE(asked) << "the control Hello does not ask for Queued answers";

  Push(0, 1);
  session_->Tick(false);
  ASSERT_EQ(transport_.Take(MsgType::Push).size(), 1u);
  Ack(0, 1, AckStatus::Queued, 0, /*via_control=*/true);
  clock_.Advance(opt_.retry_max - absl::Seconds(1));
  session_->Tick(false);
  EXPECT_TRUE(transport_.Take(MsgType::Push).empty()) << "resent though Queued on control";
  EXPECT_EQ(shared_.stats().resends, 0u);
  // A Duplicate on the control connection is not an answer the shard sends there: ignored.
  Ack(0, 1, AckStatus::Duplicate, 0, /*via_control=*/true);
  EXPECT_EQ(session_->unacked(), 1u);
}

TEST_F(ShardSessionTest, PushesBeyondTheCreditWaitForAnAnswer) {
  Start();
  session_->Tick(false);
  Welcome(7, {1, 1}, /*credit=*/1);  // one push at a time
  Update(0, 1);
  Update(1, 1);
  Push(0, 1);
  Push(1, 1);
  session_->Tick(false);
  auto sent = transport_.Take(MsgType::Push);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].h.fragment_id, 0u);
  EXPECT_EQ(sent[0].h.seq, 1u);
  EXPECT_EQ(sent[0].h.base_version, 1u);

  (void)shared_.TakeArrivals();
  Update(0, 2, /*seq=*/1);  // applied: its credit is free
  const auto arrivals = shared_.TakeArrivals();
  ASSERT_EQ(arrivals.size(), 1u);
  EXPECT_TRUE(arrivals[0].answers_push);
  EXPECT_EQ(session_->unacked(), 1u);
  session_->Tick(false);
  sent = transport_.Take(MsgType::Push);
  ASSERT_EQ(sent.size(), 1u);
  EXPECT_EQ(sent[0].h.fragment_id, 1u);
  const SyncStats s = shared_.stats();
  EXPECT_EQ(s.pushes, 2u);
  EXPECT_EQ(s.applied, 1u);
  EXPECT_EQ(s.max_staleness, 0u);  // version 2 is the round right after base 1
}

TEST_F(ShardSessionTest, AnUnansweredPushIsResentAtDoublingIntervalsAndAQueuedOneWaitsLonger) {
  Joined();
  Push(0, 1);
  session_->Tick(false);
  ASSERT_EQ(transport_.Take(MsgType::Push).size(), 1u);
  clock_.Advance(opt_.resend_after - absl::Milliseconds(1));
  session_->Tick(false);
  EXPECT_TRUE(transport_.Take(MsgType::Push).empty()) << "resent before its interval";
  clock_.Advance(absl::Milliseconds(2));
  session_->Tick(false);
  auto again = transport_.Take(MsgType::Push);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].h.seq, 1u) << "a resend keeps its sequence number";
  EXPECT_EQ(shared_.stats().resends, 1u);
  // The next interval is twice the first.
  clock_.Advance(opt_.resend_after + absl::Milliseconds(1));
  session_->Tick(false);
  EXPECT_TRUE(transport_.Take(MsgType::Push).empty());
  clock_.Advance(opt_.resend_after);
  session_->Tick(false);
  EXPECT_EQ(transport_.Take(MsgType::Push).size(), 1u);

  // Queued: the shard holds it; only retry_max passing sends it again.
  Ack(0, 1, AckStatus::Queued);
  clock_.Advance(opt_.retry_max - absl::Seconds(1));
  session_->Tick(false);
  EXPECT_TRUE(transport_.Take(MsgType::Push).empty());
  clock_.Advance(absl::Seconds(2));
  session_->Tick(false);
  EXPECT_EQ(transport_.Take(MsgType::Push).size(), 1u);
}

// A Queued push whose Applied answer was lost on a live connection (a dropped message): once
// the shard's heartbeats show the round that holds it published, the answer is taken as lost
// after the update could have crossed, not after retry_max, and the resend's Duplicate ends
// the push. In the chaos suite such a lost answer held a worker's fragment back for a minute.
TEST_F(ShardSessionTest, AQueuedPushWhoseRoundIsPublishedIsResentOnceItsAnswerIsOverdue) {
  Joined();
  auto heartbeat = [&](uint64_t version0) {
    auto h = FromShard(MsgType::Heartbeat);
    h.versions = {{0, version0}, {1, 1}};
    session_->OnMessage(Parse(h), /*via_control=*/true);
  };
  Push(0, 1);
  session_->Tick(false);
  ASSERT_EQ(transport_.Take(MsgType::Push).size(), 1u);
  Ack(0, 1, AckStatus::Queued, /*version=*/1);
  // Version 2 may be a round closed before the push came (being written when it did).
  heartbeat(2);
  EXPECT_TRUE(SentAfter(opt_.resend_after * 4, MsgType::Push).empty())
      << "resent while its round may be open";
  heartbeat(3);  // the push's round is published: its answer has been sent
  session_->Tick(false);
  EXPECT_TRUE(transport_.Take(MsgType::Push).empty()) << "resent before the answer could come";
  EXPECT_TRUE(SentAfter(opt_.resend_after - absl::Milliseconds(1), MsgType::Push).empty())
      << "resent before its interval";
  auto again = SentAfter(absl::Milliseconds(2), MsgType::Push);
  ASSERT_EQ(again.size(), 1u) << "a lost Applied answer waits for retry_max";
  EXPECT_EQ(again[0].h.seq, 1u);
  EXPECT_EQ(shared_.stats().resends, 1u);
  // Unanswered again: the next resend waits twice as long, not a Tick.
  EXPECT_TRUE(SentAfter(opt_.resend_after * 2 - absl::Milliseconds(1), MsgType::Push).empty());
  // The shard had applied it: Duplicate ends the push, kept as applied, and pulls the fragment.
  (void)shared_.TakeArrivals();
  Ack(0, 1, AckStatus::Duplicate, 3);
  EXPECT_EQ(session_->unacked(), 0u);
  EXPECT_EQ(transport_.Take(MsgType::Pull).size(), 1u);
  EXPECT_EQ(shared_.stats().duplicates, 1u);
}

// A pull whose update never comes on a live connection (the pull or its answer dropped) is
// made again once the answer is overdue, at doubling intervals, until the update comes: the
// training thread pushes the fragment only once it holds the shard's version.
TEST_F(ShardSessionTest, AnAwaitedPullIsAskedAgainOnALiveConnectionUntilItsUpdateComes) {
  Joined();
  Push(0, 1);
  session_->Tick(false);
  ASSERT_EQ(transport_.Take(MsgType::Push).size(), 1u);
  Ack(0, 1, AckStatus::Duplicate, 2);  // applied: the pull's update is the push's answer
  ASSERT_EQ(transport_.Take(MsgType::Pull).size(), 1u);
  EXPECT_TRUE(SentAfter(opt_.resend_after - absl::Milliseconds(1), MsgType::Pull).empty())
      << "asked again before its interval";
  auto again = SentAfter(absl::Milliseconds(2), MsgType::Pull);
  ASSERT_EQ(again.size(), 1u) << "a lost pull leaves the fragment waiting for a Welcome";
  EXPECT_EQ(again[0].h.fragment_id, 0u);
  EXPECT_EQ(shared_.stats().reasks, 1u);
  EXPECT_TRUE(SentAfter(opt_.resend_after * 2 - absl::Milliseconds(1), MsgType::Pull).empty())
      << "the interval did not double";
  EXPECT_EQ(SentAfter(absl::Milliseconds(2), MsgType::Pull).size(), 1u);
  // The update comes: it answers the push, and nothing is asked for again.
  (void)shared_.TakeArrivals();
  Update(0, 2);
  const auto arrivals = shared_.TakeArrivals();
  ASSERT_EQ(arrivals.size(), 1u);
  EXPECT_TRUE(arrivals[0].answers_push);
  EXPECT_TRUE(SentAfter(opt_.retry_max * 2, MsgType::Pull).empty());
  EXPECT_EQ(shared_.stats().reasks, 2u);
}

TEST_F(ShardSessionTest, AStalePushLeavesTheErrorFeedbackAsItWasAndAnAppliedOneCarriesIt) {
  Joined();
  Push(0, 1);
  session_->Tick(false);
  const auto first = transport_.Take(MsgType::Push);
  ASSERT_EQ(first.size(), 1u);
  Ack(0, 1, AckStatus::Stale, 4);
  EXPECT_EQ(Arrivals(), std::vector<Arrival::Kind>{Arrival::kDone});
  EXPECT_EQ(transport_.Take(MsgType::Pull).size(), 1u) << "a stale worker pulls the new values";
  EXPECT_EQ(shared_.stats().stale, 1u);

  Push(0, 2);  // the same delta again: the residual was undone, so the same bytes
  session_->Tick(false);
  const auto second = transport_.Take(MsgType::Push);
  ASSERT_EQ(second.size(), 1u);
  EXPECT_EQ(*second[0].payload, *first[0].payload);

  Update(0, 5, /*seq=*/2);  // applied: its residual stays and goes into the next push
  Push(0, 3);
  session_->Tick(false);
  const auto third = transport_.Take(MsgType::Push);
  ASSERT_EQ(third.size(), 1u);
  EXPECT_NE(*third[0].payload, *first[0].payload);
}

TEST_F(ShardSessionTest, ARestartedShardGetsEveryUnansweredPushAgainAndIsPulledFrom) {
  Joined();
  Push(0, 1);
  session_->Tick(false);
  ASSERT_EQ(transport_.Take(MsgType::Push).size(), 1u);
  (void)shared_.TakeEvents();

  Welcome(8, {4, 4});  // a new incarnation
  const auto again = transport_.Take(MsgType::Push);
  ASSERT_EQ(again.size(), 1u);
  EXPECT_EQ(again[0].h.seq, 1u);
  EXPECT_EQ(transport_.Take(MsgType::Pull).size(), 2u);
  EXPECT_EQ(Arrivals(), (std::vector<Arrival::Kind>{Arrival::kReset, Arrival::kReset}));
  const SyncStats s = shared_.stats();
  EXPECT_EQ(s.shard_restarts, 1u);
  EXPECT_EQ(s.resends, 1u);
  const auto events = shared_.TakeEvents();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].kind, SyncEvent::kShardRestart);

  // The same incarnation again (DyLU's periodic Hello) changes nothing.
  transport_.sent.clear();
  Welcome(8, {4, 4});
  EXPECT_TRUE(transport_.sent.empty());
  EXPECT_TRUE(shared_.TakeArrivals().empty());
}

// A pull refused BadIdentity (the shard lost this connection's binding: once, a Hello this
// worker had left queued on a closed connection, read late by a slowly recovering shard, took
// it) is lost with its answer. The training thread pushes a fragment only once the shard's
// version comes back, so a refused pull must be asked again, or the fragment never trains with
// the fleet again.
TEST_F(ShardSessionTest, ARefusedPullIsAskedAgainAfterTheNextWelcome) {
  Joined();
  Welcome(8, {4, 4});  // the restarted shard
  EXPECT_EQ(transport_.Take(MsgType::Pull).size(), 2u);
  EXPECT_EQ(Arrivals(), (std::vector<Arrival::Kind>{Arrival::kReset, Arrival::kReset}));
  Refuse(0, 0, ErrorCode::BadIdentity, MsgType::Pull);
  Refuse(1, 0, ErrorCode::BadIdentity, MsgType::Pull);
  EXPECT_FALSE(session_->welcomed());
  clock_.Advance(absl::Seconds(1));
  session_->Tick(false);
  ASSERT_EQ(transport_.Take(MsgType::Hello).size(), 1u);
  Welcome(8, {4, 4});  // the same incarnation: no restart, but the asks were lost
  auto pulls = transport_.Take(MsgType::Pull);
  ASSERT_EQ(pulls.size(), 2u);
  EXPECT_EQ(pulls[0].h.fragment_id, 0u);
  EXPECT_EQ(pulls[1].h.fragment_id, 1u);
  EXPECT_TRUE(shared_.TakeArrivals().empty()) << "no second reset";

  // Fragment 0's answer comes before the next refusal: only fragment 1 is asked for again.
  Update(0, 4);
  (void)shared_.TakeArrivals();
  Refuse(1, 0, ErrorCode::BadIdentity, MsgType::Pull);
  clock_.Advance(absl::Seconds(1));
  session_->Tick(false);
  Welcome(8, {4, 4});
  pulls = transport_.Take(MsgType::Pull);
  ASSERT_EQ(pulls.size(), 1u);
  EXPECT_EQ(pulls[0].h.fragment_id, 1u);

  // Answered: a later fresh Welcome asks for nothing.
  Update(1, 4);
  Refuse(0, 0, ErrorCode::BadIdentity, MsgType::Heartbeat);
  clock_.Advance(absl::Seconds(1));
  session_->Tick(false);
  Welcome(8, {4, 4});
  EXPECT_TRUE(transport_.Take(MsgType::Pull).empty());
}

// The same for a pull sent on a data connection that was lost before its answer came, and for
// the upload that a shard without the fragment's values asked for: the new connection's
// Welcome asks again, by pull or by upload, as the shard's versions say.
TEST_F(ShardSessionTest, AnAskALostConnectionTookIsMadeAgainOnTheNewOne) {
  Joined();
  Welcome(8, {0, 4});  // restarted, fragment 0 lost: our values are asked for, 1 is pulled
  EXPECT_EQ(Arrivals(),
            (std::vector<Arrival::Kind>{Arrival::kReset, Arrival::kNeedInit, Arrival::kReset}));
  EXPECT_EQ(transport_.Take(MsgType::Pull).size(), 1u);
  transport_.disconnected = true;  // before the upload went and the pull's answer came
  session_->Tick(false);
  EXPECT_EQ(transport_.reconnects, 2);
  EXPECT_FALSE(session_->welcomed());
  Welcome(8, {0, 4});
  EXPECT_EQ(Arrivals(), std::vector<Arrival::Kind>{Arrival::kNeedInit});
  const auto pulls = transport_.Take(MsgType::Pull);
  ASSERT_EQ(pulls.size(), 1u);
  EXPECT_EQ(pulls[0].h.fragment_id, 1u);
}

TEST_F(ShardSessionTest, AShardThatLostAFragmentEndsItsPushAndAsksForOurValues) {
  Joined();
  Push(0, 1);
  session_->Tick(false);
  ASSERT_EQ(transport_.Take(MsgType::Push).size(), 1u);
  Welcome(8, {0, 1});  // restarted without fragment 0
  EXPECT_TRUE(transport_.Take(MsgType::Push).empty());
  EXPECT_EQ(session_->unacked(), 0u);
  const auto kinds = Arrivals();
  EXPECT_EQ(kinds, (std::vector<Arrival::Kind>{Arrival::kDone, Arrival::kReset, Arrival::kNeedInit,
                                               Arrival::kReset}));
}

TEST_F(ShardSessionTest, ADamagedPushIsSentOnceMoreThenGivenUp) {
  Joined();
  Push(0, 1);
  session_->Tick(false);
  ASSERT_EQ(transport_.Take(MsgType::Push).size(), 1u);
  Refuse(0, 1, ErrorCode::BadChecksum);
  session_->Tick(false);
  ASSERT_EQ(transport_.Take(MsgType::Push).size(), 1u);
  Refuse(0, 1, ErrorCode::BadChecksum);
  session_->Tick(false);
  EXPECT_TRUE(transport_.Take(MsgType::Push).empty());
  EXPECT_EQ(session_->unacked(), 0u);
  EXPECT_EQ(Arrivals(), std::vector<Arrival::Kind>{Arrival::kDone});
  const SyncStats s = shared_.stats();
  EXPECT_EQ(s.refused, 1u);
  EXPECT_EQ(s.resends, 1u);
  EXPECT_TRUE(shared_.fatal().empty()) << "a refused push is not a refused worker";
}

// The shard answers each copy of a push (the first send, each resend with the same seq) once,
// in order, but an answer does not say which copy it is for. A refusal while a later copy has
// no answer may be an earlier copy's: the later one can still be taken and applied, so giving
// the push up then (its error feedback undone, its steps handed back) would count the delta
// twice, applied and again in the next push.
TEST_F(ShardSessionTest, ARefusalWhileAResendIsUnansweredWaitsAndTheAppliedResendKeepsItsResidual) {
  const Sent first = PushThenItsResend();
  ASSERT_TRUE(first.payload);

  Refuse(0, 1, ErrorCode::Malformed);  // the first copy's answer (say, its train was cut)
  session_->Tick(false);
  EXPECT_EQ(session_->unacked(), 1u) << "given up while its resend can still be applied";
  EXPECT_TRUE(Arrivals().empty());
  EXPECT_TRUE(transport_.Take(MsgType::Pull).empty());
  EXPECT_EQ(shared_.stats().refused, 0u);

  Update(0, 2, /*seq=*/1);  // the resend, applied
  EXPECT_EQ(session_->unacked(), 0u);
  EXPECT_EQ(shared_.stats().applied, 1u);
  EXPECT_EQ(Arrivals(), std::vector<Arrival::Kind>{Arrival::kUpdate});
  // Its residual stays (the next push carries it), not undone as for a refused push, which
  // would send the same bytes again.
  Push(0, 2, 2);
  session_->Tick(false);
  const auto next = transport_.Take(MsgType::Push);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_NE(*next[0].payload, *first.payload);
}

TEST_F(ShardSessionTest, AWaitingRefusalEndsThePushOnceTheResendIsRefusedToo) {
  const Sent first = PushThenItsResend();
  ASSERT_TRUE(first.payload);
  Refuse(0, 1, ErrorCode::Malformed);
  EXPECT_EQ(session_->unacked(), 1u);
  Refuse(0, 1, ErrorCode::Malformed);  // the resend's own answer: no copy is left
  EXPECT_EQ(session_->unacked(), 0u);
  EXPECT_EQ(Arrivals(), std::vector<Arrival::Kind>{Arrival::kDone});
  EXPECT_EQ(transport_.Take(MsgType::Pull).size(), 1u);
  EXPECT_EQ(shared_.stats().refused, 1u);
  // Its error feedback was undone: the same delta encodes to the same bytes.
  Push(0, 2);
  session_->Tick(false);
  const auto next = transport_.Take(MsgType::Push);
  ASSERT_EQ(next.size(), 1u);
  EXPECT_EQ(*next[0].payload, *first.payload);
}

TEST_F(ShardSessionTest, AWaitingRefusalEndsThePushWhenTheResendIsTakenAsLost) {
  ASSERT_TRUE(PushThenItsResend().payload);
  Refuse(0, 1, ErrorCode::Malformed);
  // The resend's wait (twice the first) passes with no answer: it is taken as lost, so the
  // refusal was the last answer; nothing is sent again.
  clock_.Advance(2 * opt_.resend_after - absl::Milliseconds(1));
  session_->Tick(false);
  EXPECT_EQ(session_->unacked(), 1u);
  clock_.Advance(absl::Milliseconds(2));
  session_->Tick(false);
  EXPECT_TRUE(transport_.Take(MsgType::Push).empty());
  EXPECT_EQ(session_->unacked(), 0u);
  EXPECT_EQ(Arrivals(), std::vector<Arrival::Kind>{Arrival::kDone});
  EXPECT_EQ(shared_.stats().refused, 1u);
}

TEST_F(ShardSessionTest, AResendTakenQueuedSupersedesAnEarlierCopysRefusal) {
  Joined();
  Push(0, 1);
  session_->Tick(false);
  ASSERT_EQ(transport_.Take(MsgType::Push).size(), 1u);
  Refuse(0, 1, ErrorCode::BadChecksum);  // damaged on the way: sent again at once
  session_->Tick(false);
  ASSERT_EQ(transport_.Take(MsgType::Push).size(), 1u);
  clock_.Advance(opt_.resend_after + absl::Milliseconds(1));
  session_->Tick(false);
  ASSERT_EQ(transport_.Take(MsgType::Push).size(), 1u) << "and once more when unanswered";
  Refuse(0, 1, ErrorCode::BadChecksum);  // the second copy damaged too
  EXPECT_EQ(session_->unacked(), 1u);
  Ack(0, 1, AckStatus::Queued);  // the third taken: the shard's now
  clock_.Advance(opt_.retry_max + absl::Seconds(1));
  session_->Tick(false);
  EXPECT_EQ(session_->unacked(), 1u);
  EXPECT_EQ(transport_.Take(MsgType::Push).size(), 1u) << "only the last-resort resend";
  EXPECT_TRUE(Arrivals().empty());
  EXPECT_EQ(shared_.stats().refused, 0u);
}

TEST_F(ShardSessionTest, APushRefusedForCreditGoesAgainAfterItsPause) {
  Joined();
  Push(0, 1);
  session_->Tick(false);
  ASSERT_EQ(transport_.Take(MsgType::Push).size(), 1u);
  Refuse(0, 1, ErrorCode::NoCredit);
  clock_.Advance(absl::Milliseconds(150));
  session_->Tick(false);
  EXPECT_TRUE(transport_.Take(MsgType::Push).empty());
  clock_.Advance(absl::Milliseconds(60));
  session_->Tick(false);
  EXPECT_EQ(transport_.Take(MsgType::Push).size(), 1u);
  EXPECT_EQ(session_->unacked(), 1u);
}

TEST_F(ShardSessionTest, ARefusedPlanOrShardOrderIsFatal) {
  Start();
  session_->Tick(false);
  Welcome(7, {1, 1}, 0, /*shard=*/1);
  EXPECT_NE(shared_.fatal().find("list the shards' endpoints in shard order"), std::string::npos)
      << shared_.fatal();
  EXPECT_FALSE(session_->welcomed());
}

TEST_F(ShardSessionTest, ARefusedCurveKeyIsFatalAndNamesTheKey) {
  opt_.curve_public_key = "the-public-key";
  Start();
  transport_.refusals.push_back(
      "the server refused the CURVE handshake (ZAP status 400) at tcp://h:1");
  session_->Tick(false);
  EXPECT_NE(shared_.fatal().find("ZAP status 400"), std::string::npos);
  EXPECT_NE(shared_.fatal().find("the-public-key"), std::string::npos);
}

// A refusal that is not the shard's ZAP verdict (a wrong shard key, a keyless side) says its
// own cause, without a hint about this worker's key.
TEST_F(ShardSessionTest, ARefusalOtherThanZapCarriesNoKeyHint) {
  opt_.curve_public_key = "the-public-key";
  Start();
  transport_.refusals.push_back("the shard at tcp://h:1 does not speak CURVE");
  session_->Tick(false);
  EXPECT_NE(shared_.fatal().find("does not speak CURVE"), std::string::npos);
  EXPECT_EQ(shared_.fatal().find("the-public-key"), std::string::npos);
}

TEST_F(ShardSessionTest, JoinsAreAskedAgainOnlyAfterAQuietInterval) {
  Start();
  session_->Tick(false);
  Welcome(7, {3, 3});
  ASSERT_EQ(transport_.Take(MsgType::Pull).size(), 2u);
  clock_.Advance(absl::Milliseconds(600));
  session_->DataArrived(100);  // the answers are coming: not lost
  clock_.Advance(absl::Milliseconds(600));
  session_->Tick(false);
  EXPECT_TRUE(transport_.Take(MsgType::Pull).empty());
  clock_.Advance(absl::Milliseconds(500));  // 1.1 s of silence
  session_->Tick(false);
  EXPECT_EQ(transport_.Take(MsgType::Pull).size(), 2u);
  EXPECT_EQ(shared_.stats().join_asks, 4u);
}

TEST_F(ShardSessionTest, OnASlowLinkAJoinIsNotAskedAgainWhileItsAnswerCanStillBeCrossing) {
  opt_.link_rate_floor = 100;  // bytes/s: the two fragments take many seconds to arrive
  Start();
  session_->Tick(false);
  Welcome(7, {3, 3});
  ASSERT_EQ(transport_.Take(MsgType::Pull).size(), 2u);
  const uint64_t bytes = (plan_.fragment(0).numel + plan_.fragment(1).numel) * 4;
  const absl::Duration crossing = absl::Seconds(bytes / 100.0);
  ASSERT_GT(crossing, opt_.join_retry * 4);
  ASSERT_LT(crossing, opt_.retry_max - absl::Seconds(2));
  clock_.Advance(crossing - absl::Seconds(1));
  session_->Tick(false);
  EXPECT_TRUE(transport_.Take(MsgType::Pull).empty());
  clock_.Advance(absl::Seconds(2));
  session_->Tick(false);
  EXPECT_EQ(transport_.Take(MsgType::Pull).size(), 2u);
}

TEST_F(ShardSessionTest, NothingIsSentOrResentOnceDrained) {
  Joined();
  Push(0, 1);
  session_->Tick(/*drained=*/true);
  EXPECT_TRUE(transport_.Take(MsgType::Push).empty());
  clock_.Advance(opt_.retry_max * 2);
  session_->Tick(true);
  EXPECT_TRUE(transport_.Take(MsgType::Push).empty());
}

// Leave (docs/protocol.md, "Leaving"): once drained the session sends one Leave, again every
// kLeaveResend while unanswered, and nothing else from then on (no heartbeat, Hello or
// reconnect); the shard's answer ends it, and so does its refusal (a shard that does not know
// the type answers UnknownType naming nothing).
TEST_F(ShardSessionTest, ALeaveIsSentOnceDrainedAndRepeatedUntilAnswered) {
  Joined();
  session_->Tick(true);
  transport_.sent.clear();
  EXPECT_FALSE(session_->leave_done());
  session_->Leave();
  auto leaves = transport_.Take(MsgType::Leave);
  ASSERT_EQ(leaves.size(), 1u);
  EXPECT_FALSE(leaves[0].control);
  EXPECT_EQ(leaves[0].h.worker_id, 5u);
  EXPECT_EQ(leaves[0].h.generation, 99u);
  EXPECT_EQ(leaves[0].h.plan_fingerprint, plan_.fingerprint());
  EXPECT_FALSE(session_->leave_done());
  session_->Leave();  // once: a second call sends nothing
  EXPECT_TRUE(SentAfter(absl::Milliseconds(400), MsgType::Leave).empty());
  EXPECT_EQ(SentAfter(absl::Milliseconds(200), MsgType::Leave).size(), 1u);
  // Minutes of silence: no heartbeat, no Hello, no reconnect, only the Leave again.
  opt_.shard_timeout = absl::Seconds(5);
  const int reconnects = transport_.reconnects;
  for (int i = 0; i < 60; ++i) {
    clock_.Advance(absl::Seconds(1));
    session_->Tick(true);
  }
  EXPECT_EQ(transport_.reconnects, reconnects);
  EXPECT_EQ(transport_.Take(MsgType::Leave).size(), 60u);
  EXPECT_TRUE(transport_.sent.empty());
  // Another worker's answer is not ours.
  auto other = FromShard(MsgType::Leave);
  other.generation = 98;
  session_->OnMessage(Parse(other), false);
  EXPECT_FALSE(session_->leave_done());
  session_->OnMessage(Parse(FromShard(MsgType::Leave)), false);
  EXPECT_TRUE(session_->leave_done());
  EXPECT_TRUE(session_->left());
  EXPECT_TRUE(SentAfter(absl::Seconds(10), MsgType::Leave).empty());
  EXPECT_TRUE(transport_.sent.empty());
}

TEST_F(ShardSessionTest, AShardThatDoesNotKnowLeaveEndsItWithItsRefusal) {
  Joined();
  session_->Leave();
  ASSERT_EQ(transport_.Take(MsgType::Leave).size(), 1u);
  // A shard from before Leave: the type is out of its enum's range, refused before the header
  // counts as parsed, so the Error names no message (refused_type Invalid, worker 0).
  auto h = FromShard(MsgType::Error);
  h.worker_id = 0;
  h.generation = 0;
  h.error_code = ErrorCode::UnknownType;
  h.message = "message type 11";
  session_->OnMessage(Parse(h), false);
  EXPECT_TRUE(session_->leave_done());
  EXPECT_FALSE(session_->left());
  EXPECT_TRUE(shared_.fatal().empty());
  EXPECT_TRUE(SentAfter(absl::Seconds(10), MsgType::Leave).empty());
}

TEST_F(ShardSessionTest, ARefusedLeaveEndsItAndNothingIsSentAgain) {
  Joined();
  session_->Leave();
  ASSERT_EQ(transport_.Take(MsgType::Leave).size(), 1u);
  Refuse(0, 0, ErrorCode::BadIdentity, MsgType::Leave);
  EXPECT_TRUE(session_->leave_done());
  EXPECT_FALSE(session_->left());
  EXPECT_TRUE(shared_.fatal().empty());
  EXPECT_TRUE(SentAfter(absl::Seconds(30), MsgType::Hello).empty()) << "no re-Hello after it";
  EXPECT_TRUE(transport_.sent.empty());
}

TEST_F(ShardSessionTest, AShardThatNeverWelcomedIsNotToldOfTheLeave) {
  Start();
  session_->Tick(false);
  (void)transport_.Take(MsgType::Hello);
  session_->Leave();
  EXPECT_TRUE(session_->leave_done());
  EXPECT_FALSE(session_->left());
  EXPECT_TRUE(SentAfter(absl::Seconds(10), MsgType::Leave).empty());
  EXPECT_TRUE(transport_.sent.empty()) << "no more Hellos either";
}

}  // namespace
}  // namespace diloco::worker
