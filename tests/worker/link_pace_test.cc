// LinkPace (worker/link_pace.h): a retry waits for the bytes ahead of its answer at the link's
// measured rate, within [interval, cap]; before a measurement, at the floor rate.
#include "worker/link_pace.h"

#include <gtest/gtest.h>

namespace diloco::worker {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(LinkPaceTest, BeforeAMeasurementTheFloorRateSetsTheWait) {
  LinkPace pace(1e6);  // 1 MB/s assumed
  EXPECT_FALSE(pace.measured());
  EXPECT_EQ(pace.Wait(4'000'000, absl::Seconds(1), absl::Seconds(60)), absl::Seconds(4));
  EXPECT_EQ(pace.Wait(1000, absl::Seconds(1), absl::Seconds(60)), absl::Seconds(1));  // interval
  EXPECT_EQ(pace.Wait(1'000'000'000, absl::Seconds(1), absl::Seconds(60)), absl::Seconds(60));
}

TEST(LinkPaceTest, ArrivalsWhileAwaitingMeasureTheRateAndIdleGapsDoNot) {
  LinkPace pace(1e6);
  pace.Idle(kT0);                                       // asked at t0
  pace.Arrived(500'000, kT0 + absl::Seconds(1), true);  // 0.5 MB/s
  EXPECT_TRUE(pace.measured());
  EXPECT_DOUBLE_EQ(pace.bytes_per_s(), 500e3);
  EXPECT_EQ(pace.Wait(2'000'000, absl::Seconds(1), absl::Seconds(60)), absl::Seconds(4));
  // A gap nothing was awaited in (an idle connection) is not a rate.
  pace.Arrived(1000, kT0 + absl::Seconds(100), false);
  EXPECT_DOUBLE_EQ(pace.bytes_per_s(), 500e3);
  // The next awaited arrival measures from the last arrival: 2 MB/s, averaged in.
  pace.Arrived(2'000'000, kT0 + absl::Seconds(101), true);
  EXPECT_DOUBLE_EQ(pace.bytes_per_s(), 0.7 * 500e3 + 0.3 * 2e6);
  // A small answer after a long wait (an ack: the peer's latency, not the link's rate).
  pace.Arrived(200, kT0 + absl::Seconds(110), true);
  EXPECT_DOUBLE_EQ(pace.bytes_per_s(), 0.7 * 500e3 + 0.3 * 2e6);
}

TEST(LinkPaceTest, AMeasuredSlowLinkWaitsLongerThanTheFloorWouldSay) {
  LinkPace pace(1e6);
  pace.Idle(kT0);
  pace.Arrived(100'000, kT0 + absl::Seconds(1), true);  // 100 KB/s: below the floor
  EXPECT_EQ(pace.Wait(1'000'000, absl::Seconds(1), absl::Seconds(60)), absl::Seconds(10));
}

}  // namespace
}  // namespace diloco::worker
