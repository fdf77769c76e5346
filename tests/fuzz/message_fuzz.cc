// libFuzzer target: ParseMessage over a multipart split of the input (frame_split.h). Built only
// with clang (tests/fuzz/run_fuzz.sh); the corpus replay test runs the seeds with any compiler.
#include <cstddef>
#include <cstdint>

#include "schema/wire.h"
#include "tests/fuzz/frame_split.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto m = diloco::wire::ParseMessage(diloco::fuzz::SplitFrames(data, size));
  if (m.ok()) {
    volatile uint64_t sink = diloco::fuzz::Touch(*m);
    (void)sink;
  } else {
    (void)diloco::wire::ErrorCodeOf(m.status());
  }
  return 0;
}
