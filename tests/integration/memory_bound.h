// The memory bounds at real model sizes (docs/architecture.md, "Memory per parameter"): the
// shard's resident bytes per parameter at steady state, and the shard's and the worker's peaks
// (VmHWM: the most a process held at once over its whole run, which a transient allocation
// raises while the steady-state reading stays the same), asserted by the size tests in the
// release build.
#pragma once

namespace diloco::testing {

// fp32 theta + momentum (8) and the pooled round buffers and receive frames in the rest. A shard
// with quantized downloads also holds their residual (Stats "download_bytes", ~0.52 B/param):
// the tests that see it add it to the bound.
inline constexpr double kShardBoundBytesPerParam = 12.5;

// Peaks (VmHWM per parameter), each the largest reading of a passing run plus a margin of
// about 10%: the peak depends on which rounds, frames and checkpoints overlap, which moves with
// the load. Measured on the 2-core dev box, release build (build/test), gpt2-124m, one shard, 8
// fragments, 2026-12-03, four runs of `nice -n 19 ctest --test-dir build/test -R
// "SizeTest|SizeWorkerTest" -V | grep B/param`: at load average 5 (other jobs' test loops), at
// 20-30 twice (a full convergence study and the chaos suite beside them; there the worker test
// failed its own checks: 7 and 10 resends, one run not finished in 4 minutes) and at 12.
//   integration_size_test, shard (synthetic int8 pushes): periodic 11.20, 11.21, 11.13, 11.14;
//   per-round 11.09, 11.21, 10.63, 11.10. Bound 12.5, the steady-state bound: here the peak is
//   the steady state.
inline constexpr double kShardPeakBoundBytesPerParam = 12.5;
//   integration_size_worker_test, shard (a real worker's fp32 join uploads, then every
//   fragment's round open at once, with the download state): periodic 13.47, 13.33, 13.34,
//   13.47; per-round 13.92, 13.86. Bound 15.5.
inline constexpr double kShardBurstPeakBoundBytesPerParam = 15.5;
//   integration_size_worker_test, the worker (its done event's peak_bytes_per_param: 16 of
//   training state, 12 of sync buffers, encoded pushes and frames in flight): periodic 31.14,
//   32.07 (7 resends), 42.46 (10 resends, load 25), 31.53; per-round 30.53, 32.61;
//   benchmarks/server/RESULTS.md, History: 31.48-32.70. Bound 36: the 42.46 came from a run that
//   failed on its resends anyway, and is not explained yet.
inline constexpr double kWorkerPeakBoundBytesPerParam = 36.0;

// In the sanitizer build the shard is instrumented too: ASan's redzones and the quarantine that
// holds freed memory back from reuse (the pool's buffers, the frame heap) put its RSS at ~14
// B/param where the release build measures 11.8, so the bound is asserted in the release build.
#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kMemoryIsTheProducts = false;
#else
inline constexpr bool kMemoryIsTheProducts = true;
#endif

}  // namespace diloco::testing
