// The sync client's two halves together without sockets or threads: a ShardSession on a fake
// clock (a recording transport; the test answers as the shard would) and the TrainingSync the
// training thread drives, stepped one inner step at a time. Training moves every parameter by
// the same amount per step, so a push's delta says exactly how many local steps it holds.
//
// The case: a push lost on the way while the data connection stays busy with other traffic;
// its resend, answered Stale many steps later, must not come back as one push carrying every
// step taken meanwhile (the chaos suite's seeded run ended worse than theta(0) from that).
#include "worker/training_sync.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "common/faults.h"
#include "kernels/codec.h"
#include "tests/worker/recording_transport.h"
#include "worker/model/gpt/gpt_config.h"
#include "worker/shard_session.h"

namespace diloco::worker {
namespace {

using wire::AckStatus;
using wire::MsgType;

constexpr float kStepMove = 1e-3f;  // what one inner step moves every parameter by
constexpr uint64_t kTokens = 10;    // per inner step
constexpr absl::Duration kStep = absl::Milliseconds(100);

// One shard of two fragments, the worker's session and training half, and a scripted shard:
// every push is taken (Queued) and applied alone (theta -= delta, outer lr 1), except that a
// push whose base is more than kMaxStaleness versions old is answered Stale. Other workers are
// simulated by fragment 0's version moving on every kOthersEvery steps (with zero deltas).
class TrainingSyncTest : public ::testing::Test {
 protected:
  static constexpr uint64_t kMaxStaleness = 2;
  static constexpr int kOthersEvery = 5;

  TrainingSyncTest()
      : manifest_(*GptManifest(GptConfig{16, 4, 1, 1, 4})),
        plan_(*Plan::Create(manifest_, /*num_fragments=*/2, /*num_shards=*/1)),
        shared_(2, 1, 4096) {
    opt_.servers = {"tcp://127.0.0.1:9"};
    opt_.num_fragments = 2;
    opt_.codec = *kernels::ParseCodec("fp32");  // deltas exact: no error feedback residual
    opt_.inner_steps = 5;
    opt_.carry_max = 4;
    opt_.stream = false;
    opt_.shard_timeout = absl::Hours(1);
    auto faults = std::make_shared<TestFaults>();
    faults->lose_push_sends = FaultCount(1);  // fragment 0's first push never reaches the shard
    opt_.faults = faults;
    params_.assign(manifest_.total_elements(), 0.0f);
    for (uint32_t f = 0; f < 2; ++f) theta_[f].assign(plan_.fragment(f).numel, 0.5f);
  }

  void Start() {
    train_ = std::make_unique<TrainingSync>(opt_, plan_, shared_);
    who_ = {plan_.fingerprint(), manifest_.fingerprint(), 3, 42};
    session_ = std::make_unique<ShardSession>(0, opt_.servers[0], opt_, plan_, who_, clock_,
                                              transport_, shared_);
    session_->Connect();
    session_->Tick(false);
    auto h = FromShard(MsgType::Welcome);
    h.incarnation = 7;
    for (uint32_t f = 0; f < 2; ++f) h.versions.emplace_back(f, version_[f]);
    Deliver(h);
    Serve();
    ASSERT_TRUE(train_->all_joined());
  }

  wire::HeaderFields FromShard(MsgType t) const { return ShardHeader(t, plan_, manifest_, who_); }

  void Deliver(const wire::HeaderFields& h, std::shared_ptr<const wire::Bytes> payload = nullptr) {
    auto m = BuildMessage(h, std::move(payload));
    ASSERT_TRUE(m.ok()) << m.status();
    session_->DataArrived(m->payload_bytes() + 64);
    session_->OnMessage(std::move(*m), /*via_control=*/false);
  }

  // Fragment f's values as an update (a pull's answer, or with `seq` a push's Applied answer).
  void SendUpdate(uint32_t f, uint64_t seq) {
    auto h = FromShard(MsgType::FragmentUpdate);
    h.fragment_id = f;
    h.version = version_[f];
    if (seq > 0) {
      h.seq = seq;
      h.ack = AckStatus::Applied;
    }
    wire::SetPayloadLayout(h, wire::kFragmentCodec, theta_[f].size());
    auto bytes = std::make_shared<wire::Bytes>(theta_[f].size() * sizeof(float));
    std::memcpy(bytes->data(), theta_[f].data(), bytes->size());
    Deliver(h, std::move(bytes));
  }

  // Answers what the session sent, then hands what arrived to the training half.
  void Serve() {
    for (const Sent& s : transport_.Take(MsgType::Pull)) SendUpdate(s.h.fragment_id, 0);
    for (const Sent& s : hold_pushes_ ? std::vector<Sent>() : transport_.Take(MsgType::Push)) {
      const uint32_t f = s.h.fragment_id;
      pushes_.push_back(s);
      auto ack = FromShard(MsgType::PushAck);
      ack.fragment_id = f;
      ack.seq = s.h.seq;
      ack.version = version_[f];
      if (s.h.base_version + kMaxStaleness < version_[f]) {
        ack.ack = AckStatus::Stale;
        Deliver(ack);
        continue;
      }
      ack.ack = AckStatus::Queued;
      Deliver(ack);
      std::vector<float> delta(theta_[f].size());
      ASSERT_TRUE(kernels::Decode(opt_.codec, *s.payload, delta).ok());
      for (size_t i = 0; i < delta.size(); ++i) theta_[f][i] -= delta[i];
      ++version_[f];
      SendUpdate(f, s.h.seq);
    }
    (void)transport_.Take(MsgType::Heartbeat);
    for (Arrival& a : shared_.TakeArrivals()) train_->Process(whole_, a);
  }

  // The whole local model, as the training thread's ranged access.
  const std::function<std::span<float>(uint64_t, uint64_t)> whole_ =
      [this](uint64_t offset, uint64_t n) { return std::span<float>(params_).subspan(offset, n); };

  // One inner step: training moves every parameter, due pushes go to the session, the clock
  // moves on, and the shard answers. Traffic keeps arriving on the data connection every step.
  void Step(int i) {
    for (float& p : params_) p -= kStepMove;
    for (PushJob& job : train_->Step(whole_, kTokens, opt_.inner_steps, opt_.codec, false))
      session_->AddPush(std::move(job));
    if (i % kOthersEvery == 0) ++version_[0];
    auto hb = FromShard(MsgType::Heartbeat);
    Deliver(hb);
    session_->Tick(false);
    Serve();
    clock_.Advance(kStep);
  }

  // The most any element of a push's delta moves.
  static float MaxMove(const Sent& s, kernels::Codec codec) {
    std::vector<float> delta(s.h.num_elements);
    EXPECT_TRUE(kernels::Decode(codec, *s.payload, delta).ok());
    float most = 0;
    for (float d : delta) most = std::max(most, std::fabs(d));
    return most;
  }

  Manifest manifest_;
  Plan plan_;
  SyncOptions opt_;
  SyncShared shared_;
  FakeClock clock_;
  RecordingTransport transport_;
  WorkerIdentity who_;
  std::unique_ptr<TrainingSync> train_;
  std::unique_ptr<ShardSession> session_;
  std::vector<float> params_;
  std::vector<float> theta_[2];
  uint64_t version_[2] = {1, 1};
  std::vector<Sent> pushes_;  // every push the shard saw, in order
  bool hold_pushes_ = false;  // the shard leaves pushes unread (unanswered) while set
};

TEST_F(TrainingSyncTest,
       ALostPushIsResentWhileTrafficFlowsAndItsLateStaleAnswerCarriesNoPileOfSteps) {
  Start();
  const int64_t bound = train_->carry_bound();
  ASSERT_EQ(bound, 20);
  constexpr int kSteps = 400;  // 40 s of fake time
  int resent_at = -1;
  for (int i = 1; i <= kSteps; ++i) {
    Step(i);
    if (resent_at < 0)
      for (const Sent& s : pushes_)
        if (s.h.fragment_id == 0 && s.h.seq == 1) resent_at = i;
  }
  // The lost push (made on step 5) was resent once the link's pace said it was lost: its
  // interval (resend_after) plus the time its bytes and the answers ahead take at the assumed
  // floor rate; the connection was never quiet, and no longer holds the resend back.
  ASSERT_GT(resent_at, 0) << "the lost push was never resent";
  EXPECT_LE((resent_at - 5) * kStep, opt_.resend_after + absl::Seconds(2))
      << "resent after " << (resent_at - 5) * kStep;

  const SyncStats st = shared_.stats();
  EXPECT_EQ(st.stale, 1u) << "the resend was to be answered Stale";
  EXPECT_EQ(st.reanchors, 1u);
  EXPECT_GE(st.reanchored_steps, static_cast<uint64_t>(bound));
  int after_stale = 0;
  for (const Sent& s : pushes_) {
    // Every push claims at most the bound, and exactly the steps and tokens its delta holds.
    EXPECT_LE(s.h.steps, bound) << "fragment " << s.h.fragment_id << " seq " << s.h.seq;
    EXPECT_EQ(s.h.tokens, s.h.steps * kTokens);
    EXPECT_NEAR(MaxMove(s, opt_.codec), s.h.steps * kStepMove, 1e-5f)
        << "fragment " << s.h.fragment_id << " seq " << s.h.seq << " claims " << s.h.steps;
    if (s.h.fragment_id == 0 && s.h.seq > 1) ++after_stale;
  }
  EXPECT_GE(after_stale, 10) << "fragment 0 went on pushing after the re-anchor";
  // The re-anchored fragment's global values moved by at most H steps per push since.
  const auto events = shared_.TakeEvents();
  int reanchor_events = 0;
  for (const SyncEvent& e : events)
    if (e.kind == SyncEvent::kReanchor) {
      ++reanchor_events;
      EXPECT_EQ(e.fragment, 0u);
      EXPECT_GT(e.steps, static_cast<uint64_t>(bound));
      EXPECT_EQ(e.tokens, e.steps * kTokens);
    }
  EXPECT_EQ(reanchor_events, 1);
}

// Unapplied pushes give their steps back: a push answered Stale at once leaves its delta in the
// local model, and the next push carries (and claims) its steps as well as the new ones.
TEST_F(TrainingSyncTest, APushEndedUnappliedWithinTheBoundGivesItsStepsToTheNext) {
  opt_.faults = nullptr;
  Start();
  // Fragment 0 moves on three versions before its first push (step 5) reaches the shard.
  for (int i = 1; i <= 4; ++i) Step(i);
  version_[0] += kMaxStaleness + 1;
  for (int i = 5; i <= 40; ++i) Step(i);
  // Stale, then once more: the next push leaves before the pull's answer has arrived.
  EXPECT_GE(shared_.stats().stale, 1u);
  EXPECT_LE(shared_.stats().stale, 2u);
  EXPECT_EQ(shared_.stats().reanchors, 0u);
  bool carried = false;
  for (const Sent& s : pushes_) {
    EXPECT_NEAR(MaxMove(s, opt_.codec), s.h.steps * kStepMove, 1e-5f)
        << "fragment " << s.h.fragment_id << " seq " << s.h.seq << " claims " << s.h.steps;
    EXPECT_EQ(s.h.tokens, s.h.steps * kTokens);
    carried |= s.h.fragment_id == 0 && s.h.seq > 1 && s.h.steps > opt_.inner_steps;
  }
  EXPECT_TRUE(carried) << "the push after the Stale one carries its steps too";
}

// Extrapolation (training_sync.h): at a push the local values move on to anchor - c x delta,
// the steps until the answer are trained from there, and the adoption of the answer keeps only
// those steps: local = global + the steps since the push.
TEST_F(TrainingSyncTest, AnExtrapolatingPushMovesOnAndItsAnswerKeepsOnlyTheStepsSince) {
  opt_.faults = nullptr;
  opt_.extrapolate = 1.5f;
  Start();
  hold_pushes_ = true;
  for (int i = 1; i <= 5; ++i) Step(i);  // both fragments push at step 5: delta 5 steps
  ASSERT_EQ(shared_.stats().pushes, 2u);
  const float theta0 = 0.5f, delta = 5 * kStepMove;
  for (float p : params_) ASSERT_NEAR(p, theta0 - 1.5f * delta, 1e-6f);
  Step(6);
  Step(7);
  hold_pushes_ = false;
  Step(8);  // the shard applies both pushes (theta -= delta) and the answers are adopted
  ASSERT_EQ(shared_.stats().applied, 2u);
  for (float p : params_) ASSERT_NEAR(p, (theta0 - delta) - 3 * kStepMove, 1e-6f);
}

// A push that ends unapplied gives its (c - 1) x delta back: the next push holds its work as it
// was, and only the steps taken (the Stale case above holds with extrapolation too, at the
// default c).
TEST_F(TrainingSyncTest, AnUnappliedExtrapolatingPushPutsTheLocalValuesBack) {
  opt_.faults = nullptr;
  opt_.extrapolate = 2.0f;
  Start();
  hold_pushes_ = true;
  for (int i = 1; i <= 5; ++i) Step(i);
  for (float p : params_) ASSERT_NEAR(p, 0.5f - 2 * 5 * kStepMove, 1e-6f);
  version_[0] = version_[1] = 10;  // far past the pushes' base: answered Stale
  hold_pushes_ = false;
  Step(6);
  ASSERT_EQ(shared_.stats().stale, 2u);
  for (float p : params_) ASSERT_NEAR(p, 0.5f - 6 * kStepMove, 1e-6f);
}

TEST_F(TrainingSyncTest, ANewHSpreadsTheNextPushesOverItsRound) {
  opt_.stream = true;
  opt_.faults = nullptr;
  Start();
  auto step = [&](uint32_t h) {
    for (float& p : params_) p -= kStepMove;
    std::vector<uint32_t> pushed;
    for (PushJob& job : train_->Step(whole_, kTokens, h, opt_.codec, false)) {
      pushed.push_back(job.fragment);
      session_->AddPush(std::move(job));
    }
    session_->Tick(false);
    Serve();
    clock_.Advance(kStep);
    return pushed;
  };
  // 30 steps at H = 40: nothing due, both fragments hold 30 steps.
  for (int i = 0; i < 30; ++i) ASSERT_TRUE(step(40).empty()) << i;
  // H drops to 10: both would be due at once; spread, fragment 0 pushes 5 steps later and
  // fragment 1 10.
  train_->Restagger(10);
  int at[2] = {-1, -1};
  for (int i = 1; i <= 10; ++i)
    for (uint32_t f : step(10))
      if (at[f] < 0) at[f] = i;
  EXPECT_EQ(at[0], 5);
  EXPECT_EQ(at[1], 10);
}

// A delta buffer is held while its push is outstanding, not for the whole run: streamed pushes,
// each answered before the next fragment's is due, share one buffer; pushes of every fragment
// at once need one each. The deltas stay exact either way (each push moves by its steps).
TEST_F(TrainingSyncTest, DeltaBuffersAreHeldOnlyWhilePushesAreOutstanding) {
  for (const bool stream : {true, false}) {
    SCOPED_TRACE(stream ? "streamed" : "every fragment at once");
    opt_.stream = stream;
    opt_.faults = nullptr;
    pushes_.clear();
    Start();
    EXPECT_EQ(train_->delta_pool().buffers(), 0u) << "nothing pushed yet: no delta held";
    uint32_t most = 0;
    for (int i = 1; i <= 40; ++i) {
      for (float& p : params_) p -= kStepMove;
      for (PushJob& job : train_->Step(whole_, kTokens, opt_.inner_steps, opt_.codec, false))
        session_->AddPush(std::move(job));
      most = std::max(most, train_->delta_pool().in_use());
      session_->Tick(false);
      Serve();  // answers every push at once
      EXPECT_EQ(train_->delta_pool().in_use(), 0u) << "step " << i;
      clock_.Advance(kStep);
    }
    ASSERT_GE(pushes_.size(), 10u);
    for (const Sent& s : pushes_)
      EXPECT_NEAR(MaxMove(s, opt_.codec), s.h.steps * kStepMove, 1e-5f)
          << "fragment " << s.h.fragment_id << " seq " << s.h.seq;
    const uint64_t largest =
        std::max(plan_.fragment(0).numel, plan_.fragment(1).numel) * sizeof(float);
    EXPECT_EQ(most, stream ? 1u : 2u);
    EXPECT_EQ(train_->delta_pool().buffers(), most);
    EXPECT_LE(train_->delta_pool().held_bytes(), most * largest);
  }
}

}  // namespace
}  // namespace diloco::worker
