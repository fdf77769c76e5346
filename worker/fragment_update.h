// What a FragmentUpdate brings, read in the fragment's order a chunk at a time: the whole fp32
// fragment as sent, or a chain of quantized updates U_{base+1} .. U_version reconstructed on
// the values the worker holds (docs/protocol.md, "Quantized downloads"). Pure functions of their
// arguments (no sockets, no threads), so the sync client and tests use them alike.
//
// A chain is rebuilt as the shard built it: P_v = P_{v-1} + deQ(U_v) with
// kernels::DecodeAccumulate (weight 1), one update after the other, which rounds the same on
// every CPU and GPU path, so the result is the shard's published values to the bit; the XXH3-64
// of the values produced is returned for the caller to compare with the header's
// values_checksum.
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

// The layout of a FragmentUpdate for a fragment of `numel` values: a whole one is numel fp32
// values in chunks (wire::kFragmentCodec); a chain is a valid codec, 1 <= base_version <
// version, and (version - base_version) updates, each in chunk frames as a push payload is.
absl::Status CheckFragmentUpdate(const wire::Message& m, uint64_t numel);

// Calls `consume(pos, values)` for consecutive chunks of the update's values, pos their first
// position in the fragment. A chain needs the values of version `from` (base_version <= from <
// version: the updates up to `from` are skipped), which `gather(pos, out)` writes into `out`,
// and `scratch` (resized here, reused across calls). Returns the XXH3-64 of all values consumed
// (of a chain; 0 for a whole fragment, whose frames carry checksums of their own). Fails, before
// consuming anything, on a `from` outside the chain; a decode failure is impossible after
// CheckFragmentUpdate but is reported.
absl::StatusOr<uint64_t> ReadFragmentUpdate(
    const wire::Message& m, uint64_t from, std::vector<float>& scratch,
    absl::FunctionRef<void(uint64_t pos, std::span<float> out)> gather,
    absl::FunctionRef<void(uint64_t pos, std::span<const float> values)> consume);

}  // namespace diloco::worker
