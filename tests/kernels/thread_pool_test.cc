// The kernel thread pool runs every range exactly once, from concurrent callers too.
#include "kernels/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace diloco::kernels {
namespace {

TEST(ThreadPool, CoversEveryUnitOnce) {
  for (size_t units : {0ul, 1ul, 5ul, 1000ul, 1000003ul}) {
    std::vector<std::atomic<int>> hits(units);
    ParallelFor(units, 1000, [&](size_t lo, size_t hi) {
      ASSERT_LT(lo, hi);
      for (size_t i = lo; i < hi; ++i) hits[i].fetch_add(1);
    });
    for (size_t i = 0; i < units; ++i) ASSERT_EQ(hits[i].load(), 1) << units << " " << i;
  }
}

TEST(ThreadPool, ConcurrentCallersAndExplicitPool) {
  ThreadPool pool(3);
  EXPECT_EQ(pool.threads(), 3);
  std::vector<std::thread> callers;
  std::atomic<long> total{0};
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      for (int rep = 0; rep < 200; ++rep) {
        pool.Run(7, [&](int i) { total.fetch_add(i + 1); });
        ParallelFor(200000, 1000, [&](size_t lo, size_t hi) { total.fetch_add(hi - lo); });
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(total.load(), 4L * 200 * (28 + 200000));
}

}  // namespace
}  // namespace diloco::kernels
