// Checkpoints written by the shard's writer thread (ShardOptions::checkpoint_thread): while a
// write is held at a gate (a deterministic test hook on the writing thread, no sleeps), the
// shard keeps answering heartbeats, Hello, Stats, pulls and pushes; per-round mode publishes a
// version only after the write holding it finished, and a killed shard recovers that version.
#include <gtest/gtest.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>

#include "tests/server/shard_harness.h"
#include "tests/util/temp_dir.h"

namespace diloco::server::testing {
namespace {

using wire::AckStatus;
using wire::MsgType;

// Each write waits on the gate for a permit; the test counts the writes that reached it.
class Gate {
 public:
  void Pass() {
    std::unique_lock<std::mutex> lock(mu_);
    ++entered_;
    cv_.notify_all();
    cv_.wait(lock, [this] { return permits_ > 0; });
    --permits_;
  }
  void Release(int n = 1) {
    std::lock_guard<std::mutex> lock(mu_);
    permits_ += n;
    cv_.notify_all();
  }
  // Waits (generously bounded, so a broken shard fails instead of hanging) for `n` writes to
  // have reached the gate.
  bool WaitEntered(int n) {
    std::unique_lock<std::mutex> lock(mu_);
    return cv_.wait_for(lock, std::chrono::seconds(60), [&] { return entered_ >= n; });
  }
  int entered() {
    std::lock_guard<std::mutex> lock(mu_);
    return entered_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int entered_ = 0, permits_ = 0;
};

std::vector<float> Filled(size_t n, float v) { return std::vector<float>(n, v); }

int Count(const std::vector<Outgoing>& out, MsgType t) {
  int n = 0;
  for (const auto& o : out) n += o.header.type == t;
  return n;
}

class ShardWriterTest : public ::testing::Test {
 protected:
  void TearDown() override {
    gate_.Release(1000);  // let a held write finish before the shard is destroyed
    h_.reset();
  }
  ShardOptions Options(Durability d) {
    auto o = TinyOptions();
    o.store_path = dir_.Sub("store");
    o.durability = d;
    o.checkpoint_thread = true;
    o.checkpoint_every_rounds = 1;
    o.test_before_checkpoint_write = [this] {
      gate_.Pass();
      return absl::OkStatus();
    };
    return o;
  }
  // Lets the held write through and returns what the next Tick sends.
  std::vector<Outgoing> FinishWrite() {
    gate_.Release();
    h_->shard().AwaitCheckpoint();
    return h_->Tick();
  }
  // Heartbeat, Hello of a new connection, Stats and a Pull are all answered at once.
  void ExpectServing(uint32_t fragment, uint64_t published) {
    auto hb = h_->Send("a", h_->Base(MsgType::Heartbeat, 1));
    const Outgoing* r = Only(hb, MsgType::Heartbeat);
    ASSERT_NE(r, nullptr);
    bool found = false;
    for (const auto& fv : r->header.versions)
      if (fv.id() == fragment) {
        EXPECT_EQ(fv.version(), published) << "fragment " << fragment;
        found = true;
      }
    EXPECT_TRUE(found);
    EXPECT_NE(Only(h_->Hello("c", 3), MsgType::Welcome), nullptr);
    EXPECT_NE(Only(h_->Send("a", h_->Base(MsgType::Stats, 1)), MsgType::Stats), nullptr);
    if (published > 0) {
      auto pull = h_->Base(MsgType::Pull, 1);
      pull.fragment_id = fragment;
      auto pulled = h_->Send("a", pull);  // Only points into it: keep it alive
      const Outgoing* up = Only(pulled, MsgType::FragmentUpdate);
      ASSERT_NE(up, nullptr);
      EXPECT_EQ(up->header.version, published);
    }
  }

  diloco::testing::TempDir dir_{"shard_writer_"};
  Gate gate_;  // outlives the shard (declared before h_)
  std::unique_ptr<ShardHarness> h_;
};

TEST_F(ShardWriterTest, PerRoundServesWhileWritingAndPublishesOnlyDurableVersions) {
  h_ = std::make_unique<ShardHarness>(Options(Durability::kPerRound));
  const uint64_t n = h_->fragment(0).numel;
  h_->Hello("a", 1);
  h_->Hello("b", 2);

  // theta(0): the Initialized answer waits for its synced checkpoint.
  EXPECT_EQ(Count(h_->Init("a", 1, 0, Filled(n, 1.0f)), MsgType::PushAck), 0);
  ASSERT_TRUE(gate_.WaitEntered(1));
  EXPECT_TRUE(h_->shard().checkpoint_in_flight());
  ExpectServing(0, 0);
  EXPECT_TRUE(h_->Tick().empty());
  auto out = FinishWrite();
  const Outgoing* init = Only(out, MsgType::PushAck);
  ASSERT_NE(init, nullptr);
  EXPECT_EQ(init->header.ack, AckStatus::Initialized);
  EXPECT_EQ(init->header.version, 1u);

  // A round closes; its version waits for the write while everything else is answered.
  EXPECT_EQ(Only(h_->Push("a", 1, 0, 1, 1, Filled(n, 0.25f)), MsgType::PushAck)->header.ack,
            AckStatus::Queued);
  h_->clock().Advance(absl::Seconds(6));  // past the grace cap (b has not pushed)
  EXPECT_TRUE(h_->Tick().empty());
  EXPECT_EQ(h_->shard().counters().rounds, 1u);
  ASSERT_TRUE(gate_.WaitEntered(2));
  EXPECT_EQ(h_->shard().counters().rounds, 1u);
  EXPECT_EQ(h_->shard().published_version(0), 1u);
  ExpectServing(0, 1);
  // A push into the fragment being written is taken (Queued); its round closes after the write.
  EXPECT_EQ(Only(h_->Push("b", 2, 0, 1, 1, Filled(n, 0.5f)), MsgType::PushAck)->header.ack,
            AckStatus::Queued);
  h_->clock().Advance(absl::Seconds(6));  // past the grace cap: due, but frozen
  EXPECT_TRUE(h_->Tick().empty());
  EXPECT_EQ(h_->shard().counters().rounds, 1u);
  const std::vector<float> theta2 = h_->shard().params(0);

  out = FinishWrite();  // version 2 published to a; b's round closes, version 3 is written
  const Outgoing* up = Only(out, MsgType::FragmentUpdate);
  ASSERT_NE(up, nullptr);
  EXPECT_EQ(up->header.ack, AckStatus::Applied);
  EXPECT_EQ(up->header.version, 2u);
  EXPECT_EQ(up->header.worker_id, 1u);
  EXPECT_EQ(h_->shard().counters().rounds, 2u);
  EXPECT_EQ(h_->shard().published_version(0), 2u);
  ASSERT_TRUE(gate_.WaitEntered(3));
  ExpectServing(0, 2);

  // Killed while version 3 is being written (the write finishes, but Tick never published it):
  // the store holds 3 or 2, never anything the shard did not make durable.
  gate_.Release();
  h_->shard().AwaitCheckpoint();
  const std::vector<float> theta3 = h_->shard().params(0);
  EXPECT_EQ(h_->shard().counters().messages_bad, 0u);
  EXPECT_EQ(h_->shard().counters().pushes_refused, 0u);
  h_.reset();
  auto o = Options(Durability::kPerRound);
  o.checkpoint_thread = false;
  h_ = std::make_unique<ShardHarness>(o);
  EXPECT_EQ(h_->shard().published_version(0), 3u);
  EXPECT_EQ(h_->shard().params(0), theta3);
  EXPECT_NE(theta2, theta3);
}

TEST_F(ShardWriterTest, AWriteHoldsOnlyTheFragmentsItWrites) {
  h_ = std::make_unique<ShardHarness>(Options(Durability::kPerRound));
  const uint64_t n0 = h_->fragment(0).numel, n1 = h_->fragment(1).numel;
  h_->Hello("a", 1);
  h_->Init("a", 1, 0, Filled(n0, 1.0f));
  ASSERT_TRUE(gate_.WaitEntered(1));
  FinishWrite();
  h_->Init("a", 1, 1, Filled(n1, 1.0f));
  ASSERT_TRUE(gate_.WaitEntered(2));
  FinishWrite();
  ASSERT_EQ(h_->shard().published_version(1), 1u);

  h_->Push("a", 1, 0, 1, 1, Filled(n0, 0.25f));
  EXPECT_TRUE(h_->Tick().empty());  // fragment 0's version 2 is being written (only it)
  ASSERT_TRUE(gate_.WaitEntered(3));
  h_->Push("a", 1, 1, 1, 1, Filled(n1, 0.25f));
  EXPECT_TRUE(h_->Tick().empty());  // fragment 1 is not held: its round closes meanwhile
  EXPECT_EQ(h_->shard().counters().rounds, 2u);
  EXPECT_EQ(h_->shard().published_version(1), 1u);  // not durable yet

  auto out = FinishWrite();  // fragment 0 goes out; fragment 1's checkpoint starts
  ASSERT_EQ(Count(out, MsgType::FragmentUpdate), 1);
  EXPECT_EQ(Only(out, MsgType::FragmentUpdate)->header.fragment_id, 0u);
  ASSERT_TRUE(gate_.WaitEntered(4));
  out = FinishWrite();
  ASSERT_EQ(Count(out, MsgType::FragmentUpdate), 1);
  EXPECT_EQ(Only(out, MsgType::FragmentUpdate)->header.fragment_id, 1u);
  EXPECT_EQ(h_->shard().published_version(1), 2u);
  EXPECT_EQ(h_->shard().counters().checkpoints, 4u);

  // Recovery reads fragment 1 from the last checkpoint and fragment 0 from the one before.
  const auto p0 = h_->shard().params(0), p1 = h_->shard().params(1);
  h_.reset();
  auto o = Options(Durability::kPerRound);
  o.checkpoint_thread = false;
  h_ = std::make_unique<ShardHarness>(o);
  EXPECT_EQ(h_->shard().published_version(0), 2u);
  EXPECT_EQ(h_->shard().published_version(1), 2u);
  EXPECT_EQ(h_->shard().params(0), p0);
  EXPECT_EQ(h_->shard().params(1), p1);
}

TEST_F(ShardWriterTest, PeriodicPublishesWithoutWaitingForTheWrite) {
  h_ = std::make_unique<ShardHarness>(Options(Durability::kPeriodic));
  const uint64_t n = h_->fragment(0).numel;
  h_->Hello("a", 1);
  h_->Init("a", 1, 0, Filled(n, 1.0f));
  ASSERT_TRUE(gate_.WaitEntered(1));
  ASSERT_EQ(Only(FinishWrite(), MsgType::PushAck)->header.ack, AckStatus::Initialized);

  h_->Push("a", 1, 0, 1, 1, Filled(n, 0.25f));
  h_->clock().Advance(absl::Seconds(6));  // past the grace cap
  auto out = h_->Tick();  // the round's checkpoint starts, and version 2 goes out at once
  ASSERT_TRUE(gate_.WaitEntered(2));
  const Outgoing* up = Only(out, MsgType::FragmentUpdate);
  ASSERT_NE(up, nullptr);
  EXPECT_EQ(up->header.version, 2u);
  ExpectServing(0, 2);
  FinishWrite();
  EXPECT_EQ(h_->shard().counters().checkpoints, 2u);
  EXPECT_EQ(h_->shard().counters().messages_bad, 0u);
}

}  // namespace
}  // namespace diloco::server::testing
