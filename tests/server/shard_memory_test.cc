// The shard's pooled buffers (server/buffer_pool.h): a kept buffer is handed out only once
// nothing else holds it, the pool keeps no more than its budget, and a published snapshot is
// theta itself, so a send still holding it keeps the values it was sent with while the next
// round changes theta (the round steps into its accumulator, which becomes theta), in both
// durability modes' publication paths, with the in-place step's result bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "kernels/outer.h"
#include "server/buffer_pool.h"
#include "tests/server/shard_harness.h"

namespace diloco::server::testing {
namespace {

using wire::AckStatus;
using wire::MsgType;

const absl::Time kT0 = absl::UnixEpoch() + absl::Hours(1);

TEST(BufferPoolTest, HandsOutAKeptBufferOnlyOnceNothingElseHoldsIt) {
  BufferPool pool(64, absl::Seconds(1));
  auto a = pool.Take(32);
  EXPECT_EQ(pool.fresh_allocations(), 1u);
  const wire::Bytes* raw = a.get();
  std::shared_ptr<const wire::Bytes> send = a;  // e.g. a snapshot being sent
  pool.Give(std::move(a), kT0);
  auto b = pool.Take(32);  // the kept one is still held: a fresh one
  EXPECT_NE(b.get(), raw);
  EXPECT_EQ(pool.fresh_allocations(), 2u);
  send.reset();
  auto c = pool.Take(32);  // now free: reused
  EXPECT_EQ(c.get(), raw);
  EXPECT_EQ(pool.fresh_allocations(), 2u);
}

TEST(BufferPoolTest, KeepsNoMoreThanItsBudgetAndMakesRoomFromFreeBuffers) {
  BufferPool pool(64, absl::Seconds(1));
  auto a = pool.Take(32), b = pool.Take(16);  // two taken at once: two buffers
  const wire::Bytes* raw_a = a.get();
  pool.Give(std::move(a), kT0);
  pool.Give(std::move(b), kT0 + absl::Seconds(1));
  EXPECT_EQ(pool.kept_bytes(), 48u);
  auto held = pool.Take(32);  // the 32 (the 16 has no room for it)
  EXPECT_EQ(held.get(), raw_a);
  auto extra = pool.Take(32);  // fresh
  std::shared_ptr<const wire::Bytes> send = held;
  pool.Give(std::move(held), kT0);   // 16 + 32 kept
  pool.Give(std::move(extra), kT0);  // 48 + 32 > 64: the free 16 goes; the held 32 stays
  EXPECT_EQ(pool.kept_bytes(), 64u);
  pool.Give(std::make_shared<wire::Bytes>(128), kT0);  // bigger than the budget: dropped
  EXPECT_EQ(pool.kept_bytes(), 64u);
}

TEST(BufferPoolTest, FreesWhatNobodyTookForItsIdleTimeAndHandsOutTheWarmestFirst) {
  BufferPool pool(1024, absl::Seconds(10));
  auto a = pool.Take(32), b = pool.Take(32);
  const wire::Bytes* raw_b = b.get();
  pool.Give(std::move(a), kT0);
  pool.Give(std::move(b), kT0 + absl::Seconds(5));
  pool.Trim(kT0 + absl::Seconds(10));  // neither is idle for longer than 10 s yet
  EXPECT_EQ(pool.kept_bytes(), 64u);
  pool.Trim(kT0 + absl::Seconds(11));  // a is
  EXPECT_EQ(pool.kept_bytes(), 32u);
  auto c = pool.Take(32);
  EXPECT_EQ(c.get(), raw_b);
  EXPECT_EQ(pool.fresh_allocations(), 2u);
  std::shared_ptr<const wire::Bytes> send = c;  // a holder keeps it past its idle time
  pool.Give(std::move(c), kT0 + absl::Seconds(12));
  pool.Trim(kT0 + absl::Minutes(5));
  EXPECT_EQ(pool.kept_bytes(), 32u);
  send.reset();
  pool.Trim(kT0 + absl::Minutes(5));
  EXPECT_EQ(pool.kept_bytes(), 0u);
}

TEST(BufferPoolTest, AKeptBufferServesAnySizeUpToItsSlot) {
  BufferPool pool(1024, absl::Seconds(10), /*slot_bytes=*/64);
  auto a = pool.Take(40);  // reserves the slot, uses 40
  EXPECT_EQ(a->size(), 40u);
  const wire::Bytes* raw = a.get();
  pool.Give(std::move(a), kT0);
  auto b = pool.Take(64);  // a fragment of another size: the same buffer, grown in place
  EXPECT_EQ(b.get(), raw);
  EXPECT_EQ(b->size(), 64u);
  pool.Give(std::move(b), kT0);
  auto c = pool.Take(16);
  EXPECT_EQ(c.get(), raw);
  EXPECT_EQ(c->size(), 16u);
  EXPECT_EQ(pool.fresh_allocations(), 1u);
  auto d = pool.Take(100);  // bigger than any slot: fresh
  EXPECT_EQ(d->size(), 100u);
  EXPECT_EQ(pool.fresh_allocations(), 2u);
}

uint64_t FreshBuffers(Shard& s) {
  const std::string json = s.StatsJson();
  const std::string key = "\"pool_fresh_buffers\":";
  const size_t at = json.find(key);
  EXPECT_NE(at, std::string::npos) << json;
  return std::stoull(json.substr(at + key.size()));
}

// All fragments pushed at once (the worker's --stream=false) close their rounds together:
// the second and later such rounds reuse the first one's accumulators and theta copies
// instead of faulting in fresh pages; once the rounds stop, the buffers are freed.
TEST(ShardMemoryTest, RoundsClosingTogetherReuseTheirBuffersAndFreeThemWhenIdle) {
  constexpr uint32_t kF = 8;
  auto o = TinyOptions(kF);
  // Fragments of a few hundred values.
  o.manifest = GptManifest(GptConfig{64, 4, 1, 1, 8}).value();
  o.buffer_idle = absl::Seconds(30);
  ShardHarness h(o);
  h.Hello("a", 1);
  for (uint32_t f = 0; f < kF; ++f)
    h.Init("a", 1, f, std::vector<float>(h.fragment(f).numel, 1.0f));
  auto round = [&](uint64_t seq) {
    for (uint32_t f = 0; f < kF; ++f)
      h.Push("a", 1, f, seq, seq, std::vector<float>(h.fragment(f).numel, 0.01f));
    auto out = h.Tick();
    int applied = 0;
    for (const auto& m : out)
      applied += m.header.type == MsgType::FragmentUpdate && m.header.ack == AckStatus::Applied;
    EXPECT_EQ(applied, static_cast<int>(kF)) << "round " << seq;
    h.clock().Advance(absl::Seconds(1));
  };
  const uint64_t thetas = FreshBuffers(h.shard());  // theta's own buffers
  round(1);
  round(2);
  const uint64_t after_two = FreshBuffers(h.shard());
  EXPECT_LE(after_two - thetas, kF);  // an accumulator per fragment, no theta copy
  for (uint64_t seq = 3; seq <= 6; ++seq) round(seq);
  EXPECT_EQ(FreshBuffers(h.shard()), after_two);
  h.clock().Advance(absl::Seconds(31));
  h.Tick();
  round(7);  // the idle buffers were freed: this round's are fresh again
  EXPECT_GT(FreshBuffers(h.shard()), after_two);
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

// A round whose theta is still published steps into its accumulator chunk by chunk
// (Shard::StepRound); on a fragment of several chunks that must be the in-place step exactly,
// momentum included, for the composed step (whose phase every chunk starts from).
TEST(ShardMemoryTest, SteppingIntoTheAccumulatorIsTheInPlaceStepBitForBit) {
  auto o = TinyOptions(1);
  // One fragment of ~580k values: three 256k chunks.
  o.manifest = GptManifest(GptConfig{8192, 4, 1, 1, 64}).value();
  o.step = RoundStep::kComposed;
  ShardHarness h(o);
  const uint64_t n = h.fragment(0).numel;
  ASSERT_GT(n, 2u << 18);
  std::vector<float> theta(n), m(n, 0.0f);
  for (uint64_t i = 0; i < n; ++i) theta[i] = std::sin(0.001f * static_cast<float>(i));
  h.Hello("a", 1);
  h.Init("a", 1, 0, theta);
  double phase = 0;
  for (uint64_t seq = 1; seq <= 3; ++seq) {
    std::vector<float> d(n);
    for (uint64_t i = 0; i < n; ++i) d[i] = 0.01f * std::cos(0.003f * static_cast<float>(i * seq));
    h.Push("a", 1, 0, seq, seq, d);
    auto out = h.Tick();
    const Outgoing* u = Only(out, MsgType::FragmentUpdate);
    ASSERT_NE(u, nullptr);
    ASSERT_EQ(u->header.ack, AckStatus::Applied);
    ASSERT_TRUE(kernels::ComposedNesterovStep(o.outer, 1.0, &phase, theta, m, d).ok());
    ASSERT_EQ(h.shard().params(0), theta) << "round " << seq;  // published: the next one swaps
  }
}

}  // namespace
}  // namespace diloco::server::testing
