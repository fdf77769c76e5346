// HeapTrimPolicy: a trim is due only after enough payload and a quiet spell, and once per burst;
// wire::TrimFrameHeap gives freed frames' pages back (resident memory drops).
#include "server/heap_trim.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "common/process_memory.h"
#include "schema/transport.h"
#include "tests/util/sanitizer_malloc.h"

namespace diloco::server {
namespace {

const absl::Time t0 = absl::FromUnixSeconds(1000);

TEST(HeapTrimPolicyTest, DueAfterABurstAndAQuietSpellOnce) {
  HeapTrimPolicy p(100, absl::Seconds(2));
  EXPECT_FALSE(p.Due(t0));  // nothing received
  p.Received(60, t0);
  EXPECT_FALSE(p.Due(t0 + absl::Seconds(10)));  // too little to be worth it
  p.Received(60, t0 + absl::Seconds(10));
  EXPECT_FALSE(p.Due(t0 + absl::Seconds(11)));  // not quiet long enough
  EXPECT_TRUE(p.Due(t0 + absl::Seconds(12)));
  p.Trimmed();
  EXPECT_FALSE(p.Due(t0 + absl::Seconds(60)));  // once per burst
  p.Received(200, t0 + absl::Seconds(61));
  EXPECT_FALSE(p.Due(t0 + absl::Seconds(62)));
  EXPECT_TRUE(p.Due(t0 + absl::Seconds(63)));
}

constexpr bool kOwnMalloc = ::diloco::testing::kSanitizerMalloc;

TEST(TrimFrameHeapTest, FreedFramesPagesGoBack) {
#if !defined(__GLIBC__)
  GTEST_SKIP() << "glibc only";
#endif
  if (kOwnMalloc) GTEST_SKIP() << "sanitizer malloc";
  wire::TuneAllocatorForFrames();
  constexpr size_t kFrame = 4 << 20, kFrames = 32;  // 128 MiB of frames, as libzmq's I/O thread
  std::thread io([] {
    std::vector<void*> held;
    for (size_t i = 0; i < kFrames; ++i) {
      held.push_back(std::malloc(kFrame));
      std::memset(held.back(), 1, kFrame);
    }
    for (void* p : held) std::free(p);
  });
  io.join();
  auto kept = ReadProcessMemory();
  ASSERT_TRUE(kept.ok());
  wire::TrimFrameHeap();
  auto trimmed = ReadProcessMemory();
  ASSERT_TRUE(trimmed.ok());
  // The tuning keeps most of the 128 MiB mapped; the trim returns most of it.
  EXPECT_GT(kept->resident_bytes, trimmed->resident_bytes + (64u << 20))
      << "resident " << (kept->resident_bytes >> 20) << " MiB before the trim, "
      << (trimmed->resident_bytes >> 20) << " MiB after";
}

}  // namespace
}  // namespace diloco::server
