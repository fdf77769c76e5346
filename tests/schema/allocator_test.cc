// wire::TuneAllocatorForFrames: frames freed by a receiver stay mapped for the next ones. The
// test plays libzmq's I/O thread (its own arena): it receives a 64 MiB payload as 4 MiB frames,
// holds them all (as a train is held until verified), frees them, and receives the next payload;
// the second payload must reuse the pages of the first instead of faulting them in again.
#include <sys/resource.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "schema/transport.h"
#include "tests/util/sanitizer_malloc.h"

namespace diloco::wire {
namespace {

constexpr bool kOwnMalloc = ::diloco::testing::kSanitizerMalloc;

// Transparent huge pages on every anonymous mapping: faults come per 2 MiB, not per page, and
// the counts below mean something else.
bool HugePagesAlways() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string mode;
  std::getline(f, mode);
  return mode.find("[always]") != std::string::npos;
}

long ThreadMinorFaults() {
  rusage u{};
  getrusage(RUSAGE_THREAD, &u);
  return u.ru_minflt;
}

TEST(AllocatorTest, HeldPayloadFramesAreReusedWithoutFaults) {
#if !defined(__GLIBC__)
  GTEST_SKIP() << "glibc only";
#endif
  if (kOwnMalloc) GTEST_SKIP() << "sanitizer malloc";
  if (HugePagesAlways()) GTEST_SKIP() << "transparent huge pages always on: faults per 2 MiB";
  TuneAllocatorForFrames();
  constexpr size_t kFrame = 4 << 20, kFrames = 16, kPages = kFrame * kFrames / 4096;
  long faults[4] = {};
  std::thread io([&] {
    for (long& f : faults) {
      const long before = ThreadMinorFaults();
      std::vector<void*> held;
      for (size_t i = 0; i < kFrames; ++i) {
        held.push_back(std::malloc(kFrame));
        std::memset(held.back(), static_cast<int>(i), kFrame);  // the recv() that fills it
      }
      for (void* p : held) std::free(p);
      f = ThreadMinorFaults() - before;
    }
  });
  io.join();
  // The first payload faults in its pages; after one more to settle, payloads must reuse them.
  // Without the top pad, glibc unmaps the arena heap that empties with every payload: ~1025
  // faults per payload here, ~36K for 256 MiB payloads in the same loop (measured).
  EXPECT_GT(faults[0], static_cast<long>(kPages / 2)) << "the first payload touched new pages";
  EXPECT_LT(faults[2], static_cast<long>(kPages / 64));
  EXPECT_LT(faults[3], static_cast<long>(kPages / 64));
}

}  // namespace
}  // namespace diloco::wire
