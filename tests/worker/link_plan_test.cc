// The link meter (union of transfers' intervals) and the codec / H choice made from it
// (worker/link_meter.h, worker/link_plan.h): no processes, no clock but hand-made times.
#include "worker/link_plan.h"

#include <gtest/gtest.h>

#include "kernels/codec.h"
#include "worker/link_meter.h"

namespace diloco::worker {
namespace {

const absl::Time t0 = absl::FromUnixSeconds(1000);
absl::Time At(double s) { return t0 + absl::Seconds(s); }

TEST(LinkMeterTest, SequentialTransfersGiveTheirRate) {
  LinkMeter m;
  for (int i = 0; i < 3; ++i) m.Add(At(i), At(i + 0.5), 500'000);  // 1 MB/s, idle between
  EXPECT_FALSE(m.measured());                                      // a window is 4 transfers
  m.Add(At(3), At(3.5), 500'000);
  ASSERT_TRUE(m.measured());
  // The idle half-seconds between transfers are not link time.
  EXPECT_DOUBLE_EQ(m.bytes_per_s(), 1e6);
}

TEST(LinkMeterTest, OverlappingTransfersShareTheLink) {
  // Two pairs, each pair crossing side by side in 1 s: 2 MB/s together, though each transfer
  // alone took 1 s for 1 MB.
  LinkMeter m;
  m.Add(At(0), At(1), 1'000'000);
  m.Add(At(0), At(1), 1'000'000);
  m.Add(At(5), At(6), 1'000'000);
  m.Add(At(5.5), At(6), 500'000);  // inside the other: adds no time
  EXPECT_DOUBLE_EQ(m.bytes_per_s(), 3.5e6 / 2);
}

TEST(LinkMeterTest, TransfersFasterThanTheResolutionCountAsThatLong) {
  // Reversed (the shard's held time ran past the arrival within one I/O pass) or empty: 1 ms.
  LinkMeter m;
  m.Add(At(1), At(0), 1'000'000);
  m.Add(At(2), At(2), 1'000'000);
  m.Add(At(3.1), At(3), 1'000'000);
  m.Add(At(4), At(4), 1'000'000);
  ASSERT_TRUE(m.measured());
  EXPECT_DOUBLE_EQ(m.bytes_per_s(), 4e6 / 4e-3);
}

TEST(LinkMeterTest, SmallWindowsWaitForBytes) {
  LinkMeter m;
  for (int i = 0; i < 8; ++i) m.Add(At(i), At(i + 0.01), 1000);  // 8 KB in all
  EXPECT_FALSE(m.measured());
}

constexpr uint64_t kFragment = 1'000'000;  // 4 fragments: 4M parameters

kernels::Codec C(const char* name) { return *kernels::ParseCodec(name); }

LinkPlanOptions Ladder(uint32_t h_min, uint32_t h_max) {
  LinkPlanOptions o;
  o.codecs = {C("int8:256"), C("int4:256")};
  o.h_min = h_min;
  o.h_max = h_max;
  o.margin = 1.5;
  o.hysteresis = 0.7;
  return o;
}

LinkMeasure Link(double up_mbit, double down_mbit, double step_s, double down_per_param) {
  return {up_mbit * 1e6 / 8, down_mbit * 1e6 / 8, step_s, down_per_param};
}

LinkPlanner Planner(uint32_t h_min, uint32_t h_max) {
  return LinkPlanner(Ladder(h_min, h_max), std::vector<uint64_t>(4, kFragment));
}

TEST(LinkPlanTest, NeedIsPushBytesUpPlusUpdateBytesDown) {
  const LinkPlanner p = Planner(100, 1000);
  const LinkMeasure m = Link(8, 16, 0.1, 1.0);  // 1 MB/s up, 2 MB/s down
  const double up = 4.0 * kernels::EncodedSize(C("int8:256"), kFragment);
  EXPECT_DOUBLE_EQ(p.Need(C("int8:256"), m), up / 1e6 + 4e6 / 2e6);
  // Before an update was measured, 4 bytes per parameter (fp32) are assumed to come down.
  EXPECT_DOUBLE_EQ(p.Need(C("int8:256"), Link(8, 16, 0.1, 0)), up / 1e6 + 16e6 / 2e6);
}

TEST(LinkPlanTest, AFastLinkKeepsTheFinestCodecAtTheSmallestH) {
  LinkPlanner p = Planner(100, 1000);
  EXPECT_FALSE(p.Update(Link(1000, 1000, 0.1, 1.0)));
  EXPECT_EQ(p.choice().codec.kind, kernels::CodecKind::kInt8);
  EXPECT_EQ(p.choice().h, 100u);
  EXPECT_LE(1.5 * p.choice().need_s, p.choice().budget_s);
}

TEST(LinkPlanTest, NothingChangesBeforeTheLinkAndTheStepAreMeasured) {
  LinkPlanner p = Planner(100, 1000);
  EXPECT_FALSE(p.Update(Link(0, 1, 0.1, 1.0)));
  EXPECT_FALSE(p.Update(Link(1, 0, 0.1, 1.0)));
  EXPECT_FALSE(p.Update(Link(1, 1, 0, 1.0)));
  EXPECT_EQ(p.choice().h, 100u);
  EXPECT_EQ(p.choice().codec.kind, kernels::CodecKind::kInt8);
}

TEST(LinkPlanTest, ASlowerUplinkTakesInt4BeforeALargerH) {
  // Round: 100 x 0.1 s = 10 s. Down: 4M x 1 B at 10 MB/s = 0.4 s. Up at 1 MB/s: int8 ~4.06 s
  // (x 1.5 = 6.7 s: fits)...
  LinkPlanner p = Planner(100, 1000);
  p.Update(Link(8, 80, 0.1, 1.0));
  EXPECT_EQ(p.choice().codec.kind, kernels::CodecKind::kInt8);
  // ... at 0.5 MB/s int8 needs 8.5 s (x 1.5 > 10 s) and int4 4.5 s (x 1.5 = 6.8 s: fits).
  EXPECT_TRUE(p.Update(Link(4, 80, 0.1, 1.0)));
  EXPECT_EQ(p.choice().codec.kind, kernels::CodecKind::kInt4);
  EXPECT_EQ(p.choice().h, 100u);
}

TEST(LinkPlanTest, TopKComesAfterInt4AtTheSmallestHBeforeALargerH) {
  // The default ladder: int8, int4, then top-k 4.3% at the smallest H before any larger H (at
  // equal bytes over a run, top-k every 10 steps beat int4 every 100 in the study).
  LinkPlanOptions o = Ladder(100, 1000);
  o.codecs.push_back(C("topk:0.0429"));
  LinkPlanner p(o, std::vector<uint64_t>(4, kFragment));
  ASSERT_EQ(p.rungs(), 2u + 12u);  // int8 and int4 at 100, top-k at 100, 125, 157, ..., 1000
  EXPECT_EQ(p.Rung(1).codec.kind, kernels::CodecKind::kInt4);
  EXPECT_EQ(p.Rung(1).h, 100u);
  EXPECT_EQ(p.Rung(2).codec.kind, kernels::CodecKind::kTopK);
  EXPECT_EQ(p.Rung(2).h, 100u);
  EXPECT_EQ(p.Rung(3).codec.kind, kernels::CodecKind::kTopK);
  EXPECT_EQ(p.Rung(3).h, 125u);
  // Round: 100 x 0.1 s = 10 s. Down: 4M x 1 B at 10 MB/s = 0.4 s. Up at 0.25 MB/s: int4 ~8.3 s
  // (x 1.5 > 10 s), top-k ~0.8 s: top-k at H = 100, not int4 at a larger H.
  EXPECT_TRUE(p.Update(Link(2, 80, 0.1, 1.0)));
  EXPECT_EQ(p.choice().codec.kind, kernels::CodecKind::kTopK);
  EXPECT_EQ(p.choice().h, 100u);
  // A faster uplink (1 MB/s: int8 ~4.5 s, within 10 s at 1.5 / 0.7) goes back to int8.
  EXPECT_TRUE(p.Update(Link(8, 80, 0.1, 1.0)));
  EXPECT_EQ(p.choice().codec.kind, kernels::CodecKind::kInt8);
}

TEST(LinkPlanTest, ASlowLinkRaisesHUntilARoundFits) {
  LinkPlanner p = Planner(100, 10000);
  const LinkMeasure slow = Link(10, 10, 0.1, 4.0);  // fp32 updates: 16 MB down at 1.25 MB/s
  EXPECT_TRUE(p.Update(slow));
  const LinkChoice& c = p.choice();
  EXPECT_EQ(c.codec.kind, kernels::CodecKind::kInt4);
  EXPECT_GT(c.h, 100u);
  EXPECT_LE(1.5 * c.need_s, c.budget_s);
  // The smallest rung that fits: the one below it does not (H grows 25% a rung).
  EXPECT_GT(1.5 * c.need_s, (c.h / 1.25 + 1) * 0.1);
}

TEST(LinkPlanTest, AHopelessLinkStopsAtTheLargestH) {
  LinkPlanner p = Planner(50, 400);
  p.Update(Link(0.1, 0.1, 0.01, 4.0));
  EXPECT_EQ(p.choice().codec.kind, kernels::CodecKind::kInt4);
  EXPECT_EQ(p.choice().h, 400u);
}

TEST(LinkPlanTest, TheChoiceGoesBackOnlyWhenTheFinerOneFitsWithRoom) {
  LinkPlanner p = Planner(100, 1000);
  ASSERT_TRUE(p.Update(Link(4, 80, 0.1, 1.0)));  // int4 (above)
  ASSERT_EQ(p.choice().codec.kind, kernels::CodecKind::kInt4);
  // int8 would fit again at margin 1.5 (1.5 x 6.3 s <= 10 s) but not at 1.5 / 0.7: stays.
  EXPECT_FALSE(p.Update(Link(5.5, 80, 0.1, 1.0)));
  EXPECT_EQ(p.choice().codec.kind, kernels::CodecKind::kInt4);
  // With room to spare it goes back.
  EXPECT_TRUE(p.Update(Link(100, 80, 0.1, 1.0)));
  EXPECT_EQ(p.choice().codec.kind, kernels::CodecKind::kInt8);
}

TEST(LinkPlanTest, AFixedCodecMovesOnlyH) {
  LinkPlanOptions o = Ladder(100, 1000);
  o.codecs = {C("int8:256")};
  LinkPlanner p(o, std::vector<uint64_t>(4, kFragment));
  p.Update(Link(4, 80, 0.1, 1.0));
  EXPECT_EQ(p.choice().codec.kind, kernels::CodecKind::kInt8);
  EXPECT_GT(p.choice().h, 100u);
}

TEST(LinkPlanTest, AFixedHMovesOnlyTheCodec) {
  LinkPlanner p = Planner(100, 100);
  EXPECT_EQ(p.rungs(), 2u);
  p.Update(Link(0.1, 0.1, 0.1, 4.0));
  EXPECT_EQ(p.choice().codec.kind, kernels::CodecKind::kInt4);
  EXPECT_EQ(p.choice().h, 100u);
}

TEST(LinkPlanTest, TheLadderRunsFromFinestToCoarsest) {
  const LinkPlanner p = Planner(100, 200);
  // int8 at 100, then int4 at 100, 125, 157, 196, 200.
  ASSERT_EQ(p.rungs(), 6u);
  EXPECT_EQ(Describe(p.Rung(0)), "int8:256 H 100");
  EXPECT_EQ(Describe(p.Rung(1)), "int4:256 H 100");
  EXPECT_EQ(p.Rung(2).h, 125u);
  EXPECT_EQ(p.Rung(5).h, 200u);
}

}  // namespace
}  // namespace diloco::worker
