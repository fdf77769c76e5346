// The host mirror's bookkeeping of a GPU trainer (worker/model/mirror_ranges.h): a range is
// fetched from the device only where it is not already current, and everything handed out is
// uploaded before the next step, once.
#include "worker/model/mirror_ranges.h"

#include <vector>

#include "gtest/gtest.h"

namespace diloco::model {
namespace {

using R = std::vector<ElementRange>;

TEST(MirrorRangesTest, AFreshRangeIsFetchedWhole) {
  MirrorRanges m;
  EXPECT_TRUE(m.empty());
  EXPECT_EQ(m.Claim(10, 20), (R{{10, 20}}));
  EXPECT_FALSE(m.empty());
  EXPECT_EQ(m.Claim(10, 20), R{});  // current now: an edit in place must not be overwritten
  EXPECT_EQ(m.Claim(12, 15), R{});
  EXPECT_EQ(m.Claim(5, 5), R{});
  EXPECT_EQ(m.TakeAll(), (R{{10, 20}}));
}

TEST(MirrorRangesTest, OnlyTheGapsBetweenCurrentRangesAreFetched) {
  MirrorRanges m;
  m.Claim(10, 20);
  m.Claim(30, 40);
  m.Claim(50, 60);
  EXPECT_EQ(m.Claim(15, 55), (R{{20, 30}, {40, 50}}));
  EXPECT_EQ(m.Claim(0, 70), (R{{0, 10}, {60, 70}}));
  EXPECT_EQ(m.TakeAll(), (R{{0, 70}}));
}

TEST(MirrorRangesTest, TouchingRangesMergeAndDisjointOnesStaySeparate) {
  MirrorRanges m;
  EXPECT_EQ(m.Claim(20, 30), (R{{20, 30}}));
  EXPECT_EQ(m.Claim(10, 20), (R{{10, 20}}));  // touches on the left
  EXPECT_EQ(m.Claim(30, 35), (R{{30, 35}}));  // and on the right
  EXPECT_EQ(m.Claim(50, 55), (R{{50, 55}}));
  EXPECT_EQ(m.Claim(0, 5), (R{{0, 5}}));
  EXPECT_EQ(m.TakeAll(), (R{{0, 5}, {10, 35}, {50, 55}}));
}

TEST(MirrorRangesTest, ARangeStartingInsideACurrentOneFetchesOnlyItsTail) {
  MirrorRanges m;
  m.Claim(0, 100);
  EXPECT_EQ(m.Claim(90, 150), (R{{100, 150}}));
  EXPECT_EQ(m.Claim(140, 160), (R{{150, 160}}));
  EXPECT_EQ(m.TakeAll(), (R{{0, 160}}));
}

TEST(MirrorRangesTest, AfterTakeAllEverythingIsFetchedAgain) {
  MirrorRanges m;
  m.Claim(0, 10);
  m.Claim(20, 30);
  EXPECT_EQ(m.TakeAll(), (R{{0, 10}, {20, 30}}));
  EXPECT_TRUE(m.empty());
  EXPECT_EQ(m.TakeAll(), R{});
  EXPECT_EQ(m.Claim(0, 30), (R{{0, 30}}));
}

// Against a plain bitmap over random claims: what is fetched is exactly what was not current,
// and TakeAll is exactly the union of the claims.
TEST(MirrorRangesTest, MatchesABitmapOverRandomClaims) {
  constexpr uint64_t kN = 200;
  uint64_t seed = 12345;
  auto next = [&] { return (seed = seed * 6364136223846793005ULL + 1442695040888963407ULL) >> 33; };
  for (int round = 0; round < 50; ++round) {
    MirrorRanges m;
    std::vector<bool> current(kN, false);
    for (int c = 0; c < 12; ++c) {
      uint64_t a = next() % kN, b = next() % (kN + 1);
      if (a > b) std::swap(a, b);
      std::vector<bool> fetched(kN, false);
      uint64_t last_end = 0;
      for (const ElementRange& r : m.Claim(a, b)) {
        ASSERT_LT(r.begin, r.end);
        ASSERT_GE(r.begin, last_end);  // in order, disjoint
        last_end = r.end;
        for (uint64_t i = r.begin; i < r.end; ++i) fetched[i] = true;
      }
      for (uint64_t i = 0; i < kN; ++i) {
        ASSERT_EQ(fetched[i], i >= a && i < b && !current[i]) << i;
        if (i >= a && i < b) current[i] = true;
      }
    }
    std::vector<bool> taken(kN, false);
    uint64_t last_end = 0;
    bool first = true;
    for (const ElementRange& r : m.TakeAll()) {
      if (!first) {
        ASSERT_GT(r.begin, last_end);  // merged where they touch
      }
      first = false;
      last_end = r.end;
      for (uint64_t i = r.begin; i < r.end; ++i) taken[i] = true;
    }
    ASSERT_EQ(taken, current);
  }
}

}  // namespace
}  // namespace diloco::model
