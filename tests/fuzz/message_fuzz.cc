// libFuzzer target: ParseMessage over a multipart split of the input (frame_split.h), a parsed
// push or update chain through the payload check and its codec's decoder (payload_feed.h), then
// the same input read as a sequence of messages through a TrainAssembler (train_feed.h). Built only
// with clang (tests/fuzz/run_fuzz.sh); the corpus replay test runs the seeds with any compiler.
//
// Every input is read twice: as it is, and from a copy whose header frames have had their
// trailers made to match (wire::ResealHeaderFrame). Since protocol version 3 the header
// checksum refuses nearly every mutation of a header before the verifier sees it; the resealed
// reading keeps the FlatBuffers verifier, the enum and version checks, the payload checks and
// the train assembler fuzzed, while the first keeps the checksum refusal itself fuzzed.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "schema/wire.h"
#include "tests/fuzz/frame_split.h"
#include "tests/fuzz/payload_feed.h"
#include "tests/fuzz/train_feed.h"

namespace {

void ParseOne(std::vector<zmq::message_t> frames) {
  auto m = diloco::wire::ParseMessage(std::move(frames));
  if (m.ok()) {
    volatile uint64_t sink = diloco::fuzz::Touch(*m);
    (void)sink;
    (void)diloco::fuzz::DecodePayload(*m);
  } else {
    (void)diloco::wire::ErrorCodeOf(m.status());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ParseOne(diloco::fuzz::SplitFrames(data, size));
  (void)diloco::fuzz::FeedTrains(data, size);
  std::vector<uint8_t> copy(data, data + size);  // resealing writes into the frames it borrows
  auto frames = diloco::fuzz::SplitFrames(copy.data(), copy.size());
  if (!frames.empty()) diloco::wire::ResealHeaderFrame(frames[0]);
  ParseOne(std::move(frames));
  std::vector<uint8_t> again(data, data + size);
  (void)diloco::fuzz::FeedTrains(again.data(), again.size(), /*reseal=*/true);
  return 0;
}
