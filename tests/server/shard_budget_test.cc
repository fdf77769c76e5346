// A Tick closes due rounds within ShardOptions::close_budget: at real sizes one round's step
// and copy take a tenth of a second per 100M parameters, and a pass that closed every due
// round at once left heartbeats unanswered past the workers' --shard_timeout. The clock here
// moves on at every read, so each closed round visibly spends the budget.
#include <gtest/gtest.h>

#include <set>

#include "tests/server/shard_harness.h"

namespace diloco::server::testing {
namespace {

using wire::AckStatus;
using wire::MsgType;

std::vector<uint32_t> Applied(const std::vector<Outgoing>& out) {
  std::vector<uint32_t> ids;
  for (const auto& m : out)
    if (m.header.type == MsgType::FragmentUpdate && m.header.ack == AckStatus::Applied)
      ids.push_back(m.header.fragment_id);
  return ids;
}

TEST(ShardCloseBudgetTest, RoundsDueTogetherCloseInTurnOnePassAtATime) {
  auto o = TinyOptions(3);
  o.close_budget = absl::Milliseconds(100);
  o.worker_timeout = absl::Hours(1);  // the stepping clock must not make the worker look dead
  ShardHarness h(o);
  h.Hello("a", 1);
  for (uint32_t f = 0; f < 3; ++f) {
    h.Init("a", 1, f, std::vector<float>(h.fragment(f).numel, 1.0f));
    h.Push("a", 1, f, 1, 1, std::vector<float>(h.fragment(f).numel, 0.01f));
  }
  h.clock().AdvanceOnEachRead(absl::Seconds(1));  // every round spends more than the budget
  std::set<uint32_t> closed;
  for (int pass = 0; pass < 3; ++pass) {
    const auto ids = Applied(h.Tick());
    ASSERT_EQ(ids.size(), 1u) << "pass " << pass;
    EXPECT_TRUE(closed.insert(ids[0]).second) << "fragment " << ids[0] << " closed twice";
    if (pass < 2) {  // a round still due: the loop must not sleep
      EXPECT_LE(h.shard().NextDeadline(), h.clock().Now()) << "pass " << pass;
    }
  }
  EXPECT_EQ(closed.size(), 3u);
  EXPECT_TRUE(Applied(h.Tick()).empty());
  for (uint32_t f = 0; f < 3; ++f) EXPECT_EQ(h.shard().published_version(f), 2u);
}

TEST(ShardCloseBudgetTest, WithoutTimePassingEveryDueRoundClosesInOneTick) {
  auto o = TinyOptions(3);
  ShardHarness h(o);
  h.Hello("a", 1);
  for (uint32_t f = 0; f < 3; ++f) {
    h.Init("a", 1, f, std::vector<float>(h.fragment(f).numel, 1.0f));
    h.Push("a", 1, f, 1, 1, std::vector<float>(h.fragment(f).numel, 0.01f));
  }
  EXPECT_EQ(Applied(h.Tick()).size(), 3u);
}

}  // namespace
}  // namespace diloco::server::testing
