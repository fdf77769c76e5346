// The shard's pooled buffers (server/buffer_pool.h): a kept buffer is handed out only once
// nothing else holds it, the pool keeps no more than its budget, and a published snapshot is
// theta itself, so a send still holding it keeps the values it was sent with while the next
// round changes theta (copy on write), in both durability modes' publication paths.
#include <gtest/gtest.h>

#include <cstring>

#include "server/buffer_pool.h"
#include "tests/server/shard_harness.h"

namespace diloco::server::testing {
namespace {

using wire::AckStatus;
using wire::MsgType;

TEST(BufferPoolTest, HandsOutAKeptBufferOnlyOnceNothingElseHoldsIt) {
  BufferPool pool(64);
  auto a = pool.Take(32);
  EXPECT_EQ(pool.fresh_allocations(), 1u);
  const wire::Bytes* raw = a.get();
  std::shared_ptr<const wire::Bytes> send = a;  // e.g. a snapshot being sent
  pool.Give(std::move(a));
  auto b = pool.Take(32);  // the kept one is still held: a fresh one
  EXPECT_NE(b.get(), raw);
  EXPECT_EQ(pool.fresh_allocations(), 2u);
  send.reset();
  auto c = pool.Take(32);  // now free: reused
  EXPECT_EQ(c.get(), raw);
  EXPECT_EQ(pool.fresh_allocations(), 2u);
}

TEST(BufferPoolTest, KeepsNoMoreThanItsBudgetAndMakesRoomFromFreeBuffers) {
  BufferPool pool(64);
  pool.Give(pool.Take(32));
  pool.Give(pool.Take(16));  // reuses nothing (size differs): kept beside it, 48 bytes
  EXPECT_EQ(pool.kept_bytes(), 48u);
  auto held = pool.Take(32);
  std::shared_ptr<const wire::Bytes> send = held;
  pool.Give(std::move(held));  // 48 kept + 32 > 64: the free 16 goes, the held 32 stays
  EXPECT_LE(pool.kept_bytes(), 64u);
  pool.Give(std::make_shared<wire::Bytes>(128));  // bigger than the budget: dropped
  EXPECT_LE(pool.kept_bytes(), 64u);
}

std::vector<float> Values(const Outgoing& o) {
  std::vector<float> v;
  for (const auto& f : o.payloads) {
    const size_t at = v.size();
    v.resize(at + f.size() / 4);
    std::memcpy(v.data() + at, f.data(), f.size());
  }
  return v;
}

TEST(ShardMemoryTest, ASentSnapshotKeepsItsValuesWhileTheNextRoundChangesTheta) {
  auto o = TinyOptions();
  ShardHarness h(o);
  const uint64_t n = h.fragment(0).numel;
  h.Hello("a", 1);
  h.Init("a", 1, 0, std::vector<float>(n, 1.0f));
  h.Push("a", 1, 0, 1, 1, std::vector<float>(n, 0.1f));
  auto out = h.Tick();
  const Outgoing* first = Only(out, MsgType::FragmentUpdate);
  ASSERT_NE(first, nullptr);
  ASSERT_EQ(first->header.ack, AckStatus::Applied);
  const std::vector<float> v1 = Values(*first);  // the frames still reference the snapshot
  ASSERT_EQ(v1, h.shard().params(0));
  h.Push("a", 1, 0, 2, 2, std::vector<float>(n, 0.1f));
  auto out2 = h.Tick();
  const Outgoing* second = Only(out2, MsgType::FragmentUpdate);
  ASSERT_NE(second, nullptr);
  EXPECT_EQ(second->header.version, 3u);
  EXPECT_EQ(Values(*first), v1);  // the round wrote a copy, not the buffer being sent
  EXPECT_NE(Values(*second), v1);
  EXPECT_EQ(Values(*second), h.shard().params(0));
}

}  // namespace
}  // namespace diloco::server::testing
