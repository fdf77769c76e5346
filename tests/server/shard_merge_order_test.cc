// What a round's merged bits depend on. Not on the apply threads: decoding on 2 threads gives
// the bits of decoding inline. With MergeOrder::kWorker (ShardOptions::merge_order,
// server/round_merge.h) not on the order pushes arrive in, and they are arrival order's bits when
// the pushes happen to arrive in worker order; with kArrival (the default) they are not, for
// deltas whose float sums depend on their order. Transport-free, fake clock.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/server/shard_harness.h"

namespace diloco::server::testing {
namespace {

using wire::AckStatus;
using wire::MsgType;

constexpr uint32_t kWorkers = 3;

// Worker w's delta for a round: values spread over six orders of magnitude, both signs, so that
// a sum of three of them rounds differently in another order for many elements.
std::vector<float> Delta(size_t n, uint32_t w, uint64_t round) {
  std::mt19937 rng(static_cast<uint32_t>(1000 * round + w));
  std::uniform_real_distribution<float> mantissa(-1, 1);
  std::uniform_int_distribution<int> exponent(-20, 0);
  std::vector<float> d(n);
  for (float& x : d) x = std::ldexp(mantissa(rng), exponent(rng));
  return d;
}

struct Result {
  std::vector<float> params;  // both fragments after the rounds
  uint64_t rounds = 0;
};

// Three rounds of both fragments, each worker pushing once per round in `order` (worker ids)
// with `codec`; unequal tokens, so each push weighs differently. `threads`: the shard's apply
// threads.
Result Rounds(MergeOrder merge_order, const std::vector<uint32_t>& order, int threads = 0,
              kernels::Codec codec = wire::kFragmentCodec) {
  auto o = TinyOptions();
  o.round.quorum = kWorkers;
  o.merge_order = merge_order;
  o.apply_threads = threads;
  ShardHarness h(o);
  for (uint32_t w = 1; w <= kWorkers; ++w) h.Hello(absl::StrCat("w", w), w);
  for (uint32_t f = 0; f < 2; ++f)
    h.Init("w1", 1, f, std::vector<float>(h.fragment(f).numel, 0.5f));
  for (uint64_t round = 1; round <= 3; ++round) {
    for (uint32_t f = 0; f < 2; ++f)
      for (uint32_t w : order) {
        auto r = h.Push(absl::StrCat("w", w), w, f, round, round,
                        Delta(h.fragment(f).numel, w + 10 * f, round), 100 + 37 * w, 10, codec);
        EXPECT_EQ(Only(r, MsgType::PushAck)->header.ack, AckStatus::Queued);
      }
    EXPECT_EQ(h.Tick().size(), 2 * kWorkers);  // both rounds close: an Applied update each
  }
  Result run{h.shard().params(0), h.shard().counters().rounds};
  const auto p1 = h.shard().params(1);
  run.params.insert(run.params.end(), p1.begin(), p1.end());
  return run;
}

size_t Differing(const std::vector<float>& a, const std::vector<float>& b) {
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i] != b[i];
  return n;
}

TEST(ShardMergeOrderTest, ThreadedApplyGivesTheSameBitsAsInline) {
  const kernels::Codec int8{kernels::CodecKind::kInt8, 64};
  const Result inline_run = Rounds(MergeOrder::kArrival, {1, 2, 3}, 0, int8);
  EXPECT_EQ(inline_run.rounds, 6u);
  EXPECT_EQ(Differing(Rounds(MergeOrder::kArrival, {1, 2, 3}, 2, int8).params, inline_run.params),
            0u);
}

const std::vector<std::vector<uint32_t>> kOrders = {{1, 2, 3}, {3, 1, 2}, {2, 3, 1}, {3, 2, 1}};

TEST(ShardMergeOrderTest, WorkerOrderGivesTheSameBitsWhateverTheArrivalOrder) {
  const Result first = Rounds(MergeOrder::kWorker, kOrders[0]);
  EXPECT_EQ(first.rounds, 6u);
  for (const auto& order : kOrders) {
    const Result r = Rounds(MergeOrder::kWorker, order, /*threads=*/2);
    EXPECT_EQ(Differing(r.params, first.params), 0u) << order[0] << order[1] << order[2];
  }
}

TEST(ShardMergeOrderTest, ArrivalOrderDependsOnTheOrderForTheseDeltas) {
  // The deltas make the order visible: otherwise the test above could not fail.
  const Result sorted = Rounds(MergeOrder::kArrival, kOrders[0]);
  for (size_t i = 1; i < kOrders.size(); ++i)
    EXPECT_GT(Differing(Rounds(MergeOrder::kArrival, kOrders[i]).params, sorted.params), 10u) << i;
}

TEST(ShardMergeOrderTest, WorkerOrderIsArrivalOrderWhenPushesArriveSorted) {
  // Holding the pushes changes when they are merged, not the merge: the same bits.
  EXPECT_EQ(Differing(Rounds(MergeOrder::kWorker, {3, 1, 2}).params,
                      Rounds(MergeOrder::kArrival, {1, 2, 3}).params),
            0u);
}

TEST(ShardMergeOrderTest, AHeldPushSentAgainIsQueuedOnceAndMergedOnce) {
  auto run = [](bool resend) {
    auto o = TinyOptions();
    o.round.quorum = 2;
    o.merge_order = MergeOrder::kWorker;
    ShardHarness h(o);
    h.Hello("a", 1);
    h.Hello("b", 2);
    const uint64_t n = h.fragment(0).numel;
    h.Init("a", 1, 0, std::vector<float>(n, 1.0f));
    h.Push("b", 2, 0, 1, 1, std::vector<float>(n, 0.3f));
    if (resend) {  // the worker heard nothing and sent it again: the round holds it already
      auto r = h.Push("b", 2, 0, 1, 1, std::vector<float>(n, 0.3f));
      EXPECT_EQ(Only(r, MsgType::PushAck)->header.ack, AckStatus::Queued);
      EXPECT_EQ(h.shard().counters().pushes_duplicate, 1u);
    }
    EXPECT_TRUE(h.Tick().empty());  // quorum 2: waits for worker 1
    h.Push("a", 1, 0, 1, 1, std::vector<float>(n, 0.1f));
    EXPECT_EQ(h.Tick().size(), 2u);
    return h.shard().params(0);
  };
  const auto once = run(false);
  // m = 0.2 (the mean); theta = 1 - 0.7 * (0.2 + 0.9 * 0.2) = 0.734
  for (float v : once) EXPECT_NEAR(v, 0.734f, 1e-6);
  EXPECT_EQ(run(true), once);
}

}  // namespace
}  // namespace diloco::server::testing
