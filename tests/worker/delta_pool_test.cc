// The pool of push delta buffers alone: reuse, best fit, and never more buffers than were in
// use at once.
#include "worker/delta_pool.h"

#include <gtest/gtest.h>

#include <utility>

namespace diloco::worker {
namespace {

TEST(DeltaPoolTest, ABufferGivenBackIsTakenAgainInsteadOfANewOne) {
  DeltaPool pool;
  DeltaPool::Buffer a = pool.Take(1000);
  ASSERT_NE(a.data, nullptr);
  EXPECT_EQ(a.capacity, 1000u);
  a.data[999] = 1.0f;  // usable to its end
  const float* where = a.data.get();
  pool.Give(std::move(a));
  EXPECT_EQ(pool.in_use(), 0u);
  DeltaPool::Buffer b = pool.Take(800);  // fits in the free one
  EXPECT_EQ(b.data.get(), where);
  EXPECT_EQ(pool.buffers(), 1u);
  EXPECT_EQ(pool.held_bytes(), 1000u * sizeof(float));
}

TEST(DeltaPoolTest, TakesTheSmallestFreeBufferThatFits) {
  DeltaPool pool;
  DeltaPool::Buffer big = pool.Take(3000), mid = pool.Take(2000), small = pool.Take(1000);
  const float* at_mid = mid.data.get();
  pool.Give(std::move(big));
  pool.Give(std::move(mid));
  pool.Give(std::move(small));
  DeltaPool::Buffer b = pool.Take(1500);
  EXPECT_EQ(b.data.get(), at_mid);
  EXPECT_EQ(pool.buffers(), 3u);
  EXPECT_EQ(pool.in_use(), 1u);
}

TEST(DeltaPoolTest, WhenNoFreeBufferFitsTheLargestFreeOneIsDropped) {
  DeltaPool pool;
  DeltaPool::Buffer a = pool.Take(100), b = pool.Take(200);
  pool.Give(std::move(a));
  pool.Give(std::move(b));
  DeltaPool::Buffer c = pool.Take(500);  // neither fits: 200 goes, 500 is made
  EXPECT_EQ(c.capacity, 500u);
  EXPECT_EQ(pool.buffers(), 2u) << "never more buffers than were in use at once";
  EXPECT_EQ(pool.held_bytes(), (100u + 500u) * sizeof(float));
  DeltaPool::Buffer d = pool.Take(50);  // the 100 left is the fit
  EXPECT_EQ(d.capacity, 100u);
  EXPECT_EQ(pool.in_use(), 2u);
}

TEST(DeltaPoolTest, GivingAnEmptyBufferIsANoOp) {
  DeltaPool pool;
  pool.Give({});
  EXPECT_EQ(pool.buffers(), 0u);
  EXPECT_EQ(pool.in_use(), 0u);
}

}  // namespace
}  // namespace diloco::worker
