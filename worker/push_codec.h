// A push's payload from a fragment's delta, and back: the chunked, quantised encoding a Push
// carries (docs/protocol.md, "Chunked payloads"), with error feedback. Pure functions of their
// arguments (no sockets, no clock, no shared state), so the sync client's I/O thread calls them
// and tests check them alone.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kernels/codec.h"
#include "schema/transport.h"

namespace diloco::worker {

struct EncodedPush {
  std::shared_ptr<const wire::Bytes> bytes;  // the chunks back to back (wire::PayloadFrames)
  std::vector<uint64_t> checksums;           // per chunk, hashed while still in cache
  bool poisoned = false;  // a non-finite delta: its chunks were zeroed and their error reset
  uint64_t poisoned_chunks = 0;
};

// Encodes `delta` with `codec`, chunk by chunk, with error feedback: per chunk e = decay x error
// + delta, payload = Q(e), error = e - deQ(payload) (`error` is updated in place; pass zeros for
// no error feedback). decay (SyncOptions::ef_decay, in (0, 1]) below 1 lets what waits in the
// residual fade, as SparseLoCo's error feedback does for top-k pushes; 1 keeps all of it. A chunk
// whose e has a NaN or Inf (a diverged model) is sent as zeros and its error reset, so nothing
// non-finite reaches the shard. fp32 is exact, so its error stays zero: an fp32 push may pass an
// empty `error` (the sync client allocates the residual only once a lossy codec is used: 4 B/param
// less for a learner that pushes fp32).
EncodedPush EncodePush(kernels::Codec codec, std::span<const float> delta, std::span<float> error,
                       float decay = 1.0f);

// The residual's decay a push of `codec` takes under SyncOptions::ef_decay `option`: the option
// when it is set (in (0, 1]), else (0, the default) kTopKEfDecay for top-k pushes and 1 for every
// other codec. A top-k fleet at H = 50 ended 1.194x the int8 fleet with the whole residual kept
// and 1.052x with 0.8 and the shards' sparse step at lr 4 (benchmarks/quality/RESULTS.md, "Top-k
// pushes at H = 50"); the dense codecs' residual is a quantisation error, kept whole.
inline constexpr float kTopKEfDecay = 0.8f;
float EfDecayFor(kernels::Codec codec, float option);

// Takes a push that will never be applied back out of the error: error = (error - delta +
// deQ(payload)) / decay, returning it to what it was before EncodePush (up to float rounding). A
// poisoned push, and one encoded without an error (fp32), has nothing to undo.
void UndoErrorFeedback(kernels::Codec codec, std::span<const float> delta, std::span<float> error,
                       const EncodedPush& push, float decay = 1.0f);

}  // namespace diloco::worker
