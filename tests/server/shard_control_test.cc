// The control connection: a worker's second connection to a shard, bound by a Hello with
// channel Control once its data connection is bound, carrying heartbeats (and, to a worker that
// takes them there, pushes' Queued answers). Heartbeats on
// it keep the worker live; nothing that changes state is accepted on it; a new generation or a
// rebinding drops it.
#include <gtest/gtest.h>

#include "tests/server/shard_harness.h"

namespace diloco::server::testing {
namespace {

using wire::AckStatus;
using wire::Channel;
using wire::ErrorCode;
using wire::MsgType;

class ShardControlTest : public ::testing::Test {
 protected:
  void SetUp() override { Start(TinyOptions()); }
  void Start(ShardOptions o) {
    h_ = std::make_unique<ShardHarness>(std::move(o));
    n0_ = h_->fragment(0).numel;
    h_->Hello("a", 1);
    ASSERT_EQ(
        Only(h_->Init("a", 1, 0, std::vector<float>(n0_, 1.0f)), MsgType::PushAck)->header.ack,
        AckStatus::Initialized);
  }
  std::vector<Outgoing> ControlHello(const std::string& rid, uint32_t worker, uint64_t gen = 1,
                                     bool answers_on_control = false) {
    auto hf = h_->Base(MsgType::Hello, worker, gen);
    hf.channel = Channel::Control;
    hf.answers_on_control = answers_on_control;
    return h_->Send(rid, hf);
  }
  std::vector<Outgoing> Heartbeat(const std::string& rid, uint32_t worker, uint64_t gen = 1) {
    return h_->Send(rid, h_->Base(MsgType::Heartbeat, worker, gen));
  }
  static ErrorCode Refusal(const std::vector<Outgoing>& out) {
    const Outgoing* e = Only(out, MsgType::Error);
    return e ? e->header.error_code : ErrorCode::None;
  }
  std::unique_ptr<ShardHarness> h_;
  uint64_t n0_ = 0;
};

TEST_F(ShardControlTest, ControlHelloIsWelcomedOnItsOwnConnection) {
  auto out = ControlHello("a-ctl", 1);
  const Outgoing* w = Only(out, MsgType::Welcome);
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->routing_id, "a-ctl");
  EXPECT_EQ(w->header.channel, Channel::Control);
  auto hb = Heartbeat("a-ctl", 1);
  const Outgoing* r = Only(hb, MsgType::Heartbeat);
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->routing_id, "a-ctl");
  ASSERT_EQ(r->header.versions.size(), 2u);
  EXPECT_EQ(r->header.versions[0].version(), 1u);
}

TEST_F(ShardControlTest, ControlHelloNeedsTheWorkersDataConnectionFirst) {
  const uint32_t live = h_->shard().live_workers();
  // A worker the shard has never seen: refused, and no worker record appears.
  EXPECT_EQ(Refusal(ControlHello("x-ctl", 7)), ErrorCode::BadIdentity);
  EXPECT_EQ(h_->shard().live_workers(), live);
  EXPECT_EQ(Refusal(Heartbeat("x-ctl", 7)), ErrorCode::BadIdentity);
  // A known worker in another generation.
  EXPECT_EQ(Refusal(ControlHello("a-ctl", 1, 2)), ErrorCode::BadIdentity);
  // A data connection cannot turn into a control connection.
  EXPECT_EQ(Refusal(ControlHello("a", 1)), ErrorCode::BadIdentity);
  auto out = h_->Push("a", 1, 0, 1, 1, std::vector<float>(n0_, 0.5f));
  EXPECT_EQ(Only(out, MsgType::PushAck)->header.ack, AckStatus::Queued);
}

TEST_F(ShardControlTest, ControlConnectionRefusesEverythingButHeartbeats) {
  ControlHello("a-ctl", 1);
  const auto before = h_->shard().params(0);
  auto out = h_->Push("a-ctl", 1, 0, 1, 1, std::vector<float>(n0_, 0.5f));
  EXPECT_EQ(Refusal(out), ErrorCode::BadIdentity);
  auto pull = h_->Base(MsgType::Pull, 1);
  pull.fragment_id = 0;
  EXPECT_EQ(Refusal(h_->Send("a-ctl", pull)), ErrorCode::BadIdentity);
  EXPECT_EQ(Refusal(h_->Init("a-ctl", 1, 1, std::vector<float>(h_->fragment(1).numel, 2.0f))),
            ErrorCode::BadIdentity);
  EXPECT_TRUE(h_->Tick().empty());
  EXPECT_EQ(h_->shard().counters().pushes_queued, 0u);
  EXPECT_EQ(h_->shard().params(0), before);
  EXPECT_EQ(h_->shard().published_version(1), 0u);
  // The data connection is untouched: the same push goes through there, and the round's
  // update goes back on it, not on the control connection.
  h_->Push("a", 1, 0, 1, 1, std::vector<float>(n0_, 0.5f));
  h_->clock().Advance(absl::Seconds(6));
  auto closed = h_->Tick();
  const Outgoing* u = Only(closed, MsgType::FragmentUpdate);
  ASSERT_NE(u, nullptr);
  EXPECT_EQ(u->routing_id, "a");
}

// A worker whose control Hello says it takes Queued answers there gets them there (ahead of the
// updates queued on its data connection); the Applied answer still rides on the update, on the
// data connection. Without the flag (a worker from before 2026-12-03), all answers stay on data.
TEST_F(ShardControlTest, QueuedAnswersGoOnTheControlConnectionOfAWorkerThatTakesThem) {
  ControlHello("a-ctl", 1, 1, /*answers_on_control=*/true);
  auto out = h_->Push("a", 1, 0, 1, 1, std::vector<float>(n0_, 0.5f));
  const Outgoing* q = Only(out, MsgType::PushAck);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->header.ack, AckStatus::Queued);
  EXPECT_EQ(q->routing_id, "a-ctl");
  // The same push again while it waits in the round: Queued again, on control too.
  auto again = h_->Push("a", 1, 0, 1, 1, std::vector<float>(n0_, 0.5f));
  ASSERT_NE(Only(again, MsgType::PushAck), nullptr);
  EXPECT_EQ(Only(again, MsgType::PushAck)->header.ack, AckStatus::Queued);
  EXPECT_EQ(Only(again, MsgType::PushAck)->routing_id, "a-ctl");
  h_->clock().Advance(absl::Seconds(6));
  auto closed = h_->Tick();
  const Outgoing* u = Only(closed, MsgType::FragmentUpdate);
  ASSERT_NE(u, nullptr);
  EXPECT_EQ(u->routing_id, "a");
  EXPECT_EQ(u->header.ack, AckStatus::Applied);
  // Applied before: a Duplicate answer, on the data connection (it asks for a pull there).
  auto dup = h_->Push("a", 1, 0, 1, 1, std::vector<float>(n0_, 0.5f));
  ASSERT_NE(Only(dup, MsgType::PushAck), nullptr);
  EXPECT_EQ(Only(dup, MsgType::PushAck)->header.ack, AckStatus::Duplicate);
  EXPECT_EQ(Only(dup, MsgType::PushAck)->routing_id, "a");
  // A control connection bound again without the flag: answers go on data again.
  ControlHello("a-ctl2", 1);
  auto later = h_->Push("a", 1, 0, 2, 1, std::vector<float>(n0_, 0.5f));
  ASSERT_NE(Only(later, MsgType::PushAck), nullptr);
  EXPECT_EQ(Only(later, MsgType::PushAck)->header.ack, AckStatus::Queued);
  EXPECT_EQ(Only(later, MsgType::PushAck)->routing_id, "a");
}

TEST_F(ShardControlTest, QueuedAnswersStayOnTheDataConnectionWithoutTheFlag) {
  ControlHello("a-ctl", 1);
  auto out = h_->Push("a", 1, 0, 1, 1, std::vector<float>(n0_, 0.5f));
  ASSERT_NE(Only(out, MsgType::PushAck), nullptr);
  EXPECT_EQ(Only(out, MsgType::PushAck)->header.ack, AckStatus::Queued);
  EXPECT_EQ(Only(out, MsgType::PushAck)->routing_id, "a");
}

TEST_F(ShardControlTest, HeartbeatsOnTheControlConnectionKeepAWorkerLive) {
  auto o = TinyOptions();
  o.round.quorum = 2;
  o.round.elastic = true;  // a dead worker is not waited for
  o.round.grace_cap = absl::Seconds(20);
  o.worker_timeout = absl::Seconds(2);
  Start(o);
  h_->Hello("b", 2);
  ControlHello("b-ctl", 2);
  for (int i = 0; i < 5; ++i) {  // 5 s of silence on b's data connection
    h_->clock().Advance(absl::Seconds(1));
    Heartbeat("b-ctl", 2);
  }
  h_->Push("a", 1, 0, 1, 1, std::vector<float>(n0_, 0.5f));
  EXPECT_TRUE(h_->Tick().empty());        // worker 2 is live: the round waits for it
  h_->clock().Advance(absl::Seconds(3));  // its heartbeats stop: dead after 2 s
  EXPECT_EQ(h_->Tick().size(), 1u);
}

TEST_F(ShardControlTest, NewGenerationDropsTheOldControlConnection) {
  ControlHello("a-ctl", 1);
  h_->Hello("a2", 1, 2);  // the worker restarted
  EXPECT_EQ(Refusal(Heartbeat("a-ctl", 1, 1)), ErrorCode::BadIdentity);
  EXPECT_EQ(Refusal(Heartbeat("a-ctl", 1, 2)), ErrorCode::BadIdentity);
  EXPECT_EQ(Only(ControlHello("a2-ctl", 1, 2), MsgType::Welcome)->routing_id, "a2-ctl");
  EXPECT_EQ(Only(Heartbeat("a2-ctl", 1, 2), MsgType::Heartbeat)->routing_id, "a2-ctl");
}

TEST_F(ShardControlTest, AConnectionServesOneWorker) {
  h_->Hello("b", 2);
  ControlHello("b-ctl", 2);
  // Worker 3 says Hello on b's control connection as a data connection: the connection moves
  // to worker 3 and worker 2 keeps no stale reference to it.
  h_->Hello("b-ctl", 3);
  EXPECT_EQ(Refusal(Heartbeat("b-ctl", 2)), ErrorCode::BadIdentity);
  EXPECT_EQ(Only(ControlHello("b-ctl2", 2), MsgType::Welcome)->routing_id, "b-ctl2");
  EXPECT_EQ(Only(Heartbeat("b-ctl", 3), MsgType::Heartbeat)->routing_id, "b-ctl");
}

}  // namespace
}  // namespace diloco::server::testing
