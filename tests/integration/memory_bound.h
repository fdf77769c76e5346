// The shard's memory bound at real model sizes (docs/architecture.md, "Memory"): resident
// bytes per parameter at steady state, asserted by the size tests in the release build.
#pragma once

namespace diloco::testing {

// fp32 theta + momentum (8) and the pooled round buffers and receive frames in the rest. A shard
// with quantized downloads also holds their residual (Stats "download_bytes", ~0.52 B/param):
// the tests that see it add it to the bound.
inline constexpr double kShardBoundBytesPerParam = 12.5;

// In the sanitizer build the shard is instrumented too: ASan's redzones and the quarantine that
// holds freed memory back from reuse (the pool's buffers, the frame heap) put its RSS at ~14
// B/param where the release build measures 11.8, so the bound is asserted in the release build.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kMemoryIsTheProducts = false;
#else
inline constexpr bool kMemoryIsTheProducts = true;
#endif

}  // namespace diloco::testing
