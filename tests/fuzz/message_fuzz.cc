// libFuzzer target: ParseMessage over a multipart split of the input (frame_split.h), then the
// same input read as a sequence of messages through a TrainAssembler (train_feed.h). Built only
// with clang (tests/fuzz/run_fuzz.sh); the corpus replay test runs the seeds with any compiler.
#include <cstddef>
#include <cstdint>

#include "schema/wire.h"
#include "tests/fuzz/frame_split.h"
#include "tests/fuzz/train_feed.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto m = diloco::wire::ParseMessage(diloco::fuzz::SplitFrames(data, size));
  if (m.ok()) {
    volatile uint64_t sink = diloco::fuzz::Touch(*m);
    (void)sink;
  } else {
    (void)diloco::wire::ErrorCodeOf(m.status());
  }
  (void)diloco::fuzz::FeedTrains(data, size);
  return 0;
}
