// The pool's budget counts resident bytes (the most each buffer held, not what it reserves) and
// follows the shard's other memory: a smaller budget frees kept buffers nothing holds, oldest
// first (server/buffer_pool.h).
#include <gtest/gtest.h>

#include "server/buffer_pool.h"

namespace diloco::server {
namespace {

const absl::Time kT0 = absl::FromUnixSeconds(1000);

TEST(BufferPoolBudgetTest, CountsTheMostABufferHeldNotWhatItReserves) {
  BufferPool pool(100, absl::Seconds(10), /*slot_bytes=*/1000);
  auto a = pool.Take(60);  // reserves 1000, touches 60
  pool.Give(std::move(a), kT0);
  EXPECT_EQ(pool.kept_bytes(), 60u);
  auto b = pool.Take(20);  // the same buffer used for less: its 60 touched bytes stay resident
  EXPECT_EQ(b->size(), 20u);
  pool.Give(std::move(b), kT0);
  EXPECT_EQ(pool.kept_bytes(), 60u);
  auto c = pool.Take(90);  // grown within its reserve: 90 resident now
  pool.Give(std::move(c), kT0);
  EXPECT_EQ(pool.kept_bytes(), 90u);
  auto d = pool.Take(90), e = pool.Take(30);  // e is fresh: 90 + 30 is over 100
  pool.Give(std::move(d), kT0);
  pool.Give(std::move(e), kT0 + absl::Seconds(1));  // the older free 90 makes room for it
  EXPECT_EQ(pool.kept_bytes(), 30u);
  EXPECT_EQ(pool.fresh_allocations(), 2u);
}

TEST(BufferPoolBudgetTest, ASmallerBudgetFreesFreeBuffersOldestFirstAndSparesHeldOnes) {
  BufferPool pool(100, absl::Seconds(10));
  auto a = pool.Take(30), b = pool.Take(30), c = pool.Take(30);
  std::shared_ptr<const wire::Bytes> send = a;  // a is still on the wire
  pool.Give(std::move(a), kT0);
  pool.Give(std::move(b), kT0 + absl::Seconds(1));
  pool.Give(std::move(c), kT0 + absl::Seconds(2));
  EXPECT_EQ(pool.kept_bytes(), 90u);
  pool.SetBudget(60);  // b goes (the oldest free one); a is held, c is newer
  EXPECT_EQ(pool.budget(), 60u);
  EXPECT_EQ(pool.kept_bytes(), 60u);
  pool.SetBudget(40);  // held a still counts: c goes too, and a stays over the budget while held
  EXPECT_EQ(pool.kept_bytes(), 30u);
  send.reset();
  auto again = pool.Take(30);  // a, free again
  EXPECT_EQ(pool.fresh_allocations(), 3u);
  pool.SetBudget(0);
  pool.Give(std::move(again), kT0);  // nothing fits a zero budget
  EXPECT_EQ(pool.kept_bytes(), 0u);
}

}  // namespace
}  // namespace diloco::server
