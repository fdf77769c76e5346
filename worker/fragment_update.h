// What a FragmentUpdate brings, read in the fragment's order a chunk at a time: the whole fp32
// fragment as sent, or a chain of quantized updates reconstructed on values the worker holds
// (docs/protocol.md, "Quantized downloads" and "Keyframes"). Pure functions of their arguments
// (no sockets, no threads), so the sync client and tests use them alike.
//
// A chain is rebuilt as the shard built it: each update is added to the values the one before
// it made (the first to base_version's), P_x = P_base(x) + deQ(U_x), with
// kernels::DecodeAccumulate (weight 1), which rounds the same on every CPU and GPU path, so the
// result is the shard's published values to the bit; the XXH3-64 of the values produced is
// returned for the caller to compare with the header's values_checksum. Without keyframes the
// chain is U_{base+1} .. U_version, one per version; with them, the updates of the keyframes
// after base_version and then version's, and the worker keeps the values of the newest keyframe
// (the header's keyframe_version) apart from those it adopts, to build the next chain on.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "schema/wire.h"

namespace diloco::worker {

// A chain of quantized updates (any codec but fp32), not a whole fragment.
bool IsUpdateChain(const wire::Header& h);

// How a worker that holds version `held` and keyframe `keyframe` (whose values it keeps apart
// when keyframe != held) rebuilds a chain.
struct ChainPlan {
  enum class Source { kHeld, kKeyframe } source = Source::kHeld;  // the values it starts from
  uint64_t skip = 0;  // updates already held (one per version, held past base_version)
  // The values of the new keyframe, to keep apart: after this many of the chain's updates
  // (0: the values it starts from); -1: none to keep (the new keyframe is the chain's version,
  // or is the keyframe already kept apart).
  int64_t keep_after = -1;
  uint64_t keyframe = 0;  // the keyframe after the chain (0: none this worker holds)
};

// The chain's plan for a worker holding `held` and `keyframe` (0: none); FailedPrecondition when
// it holds neither the chain's base nor a version in a chain of one update per version (then
// the whole fragment is asked for).
absl::StatusOr<ChainPlan> PlanChain(const wire::Header& h, uint64_t held, uint64_t keyframe);

// The layout of a FragmentUpdate for a fragment of `numel` values: a whole one is numel fp32
// values in chunks (wire::kFragmentCodec); a chain is a valid codec, 1 <= base_version <
// version, and chain_updates (or version - base_version) updates, at most one per version, each
// in chunk frames as a push payload is; a keyframe_version, when given, in [base, version].
absl::Status CheckFragmentUpdate(const wire::Message& m, uint64_t numel);

// Calls `consume(pos, values)` for consecutive chunks of the update's values, pos their first
// position in the fragment. A chain is rebuilt as `plan` (PlanChain) says: `gather(pos, out)`
// writes the values it starts from (plan.source's) into `out`, `keep(pos, values)` takes the
// new keyframe's values (when plan.keep_after >= 0), and `scratch` is resized here and reused
// across calls. Returns the XXH3-64 of all values consumed (of a chain; 0 for a whole fragment,
// whose frames carry checksums of their own). A decode failure is impossible after
// CheckFragmentUpdate but is reported.
absl::StatusOr<uint64_t> ReadFragmentUpdate(
    const wire::Message& m, const ChainPlan& plan, std::vector<float>& scratch,
    absl::FunctionRef<void(uint64_t pos, std::span<float> out)> gather,
    absl::FunctionRef<void(uint64_t pos, std::span<const float> values)> consume,
    absl::FunctionRef<void(uint64_t pos, std::span<const float> values)> keep);

}  // namespace diloco::worker
