// The CPU trainer's threads: a fixed pool that runs the parts of one piece of work (the row or
// column blocks of a large matrix product, each a single-threaded OpenBLAS call; the (batch,
// head) pairs of attention) and waits for them by blocking, not spinning.
//
// Why not OpenBLAS's own threads: they spin and yield while they wait for each other at the end
// of every product. Beside any other runnable process one of them is descheduled while the
// others spin, and a worker with --threads=2 on a 2-core machine fell 3 to 20 times below its
// quiet rate (benchmarks/model/RESULTS.md, "The CPU trainer's threads"). Threads that block give
// the other process its share and lose only that share.
#pragma once

#include "absl/functional/function_ref.h"

namespace diloco::model {

// n >= 1: the pool runs n parts at once (the caller and n - 1 threads), and OpenBLAS runs one
// thread per call. Process-wide; call it before training, not while a ParallelFor runs.
void SetCpuThreads(int n);
// The pool's width (1 until SetCpuThreads).
int CpuThreads();
// Runs fn(0), ..., fn(parts - 1) on the pool and the calling thread; returns when every part
// has returned. Parts are handed out one at a time as threads come free, so with several parts
// per thread a thread that the kernel set aside holds up only the part it is running. Called
// from inside a part it runs the parts inline, one after the other. One caller at a time (the
// training thread).
void ParallelFor(int parts, absl::FunctionRef<void(int)> fn);
// The same, with the slot of the thread running each part: 0 for the caller, 1 .. CpuThreads()
// - 1 for the pool's threads (per-thread scratch: no two parts run in one slot at once).
void ParallelForSlots(int parts, absl::FunctionRef<void(int part, int slot)> fn);
// How many parts to cut `flops` of work into: about 1 MFLOP each at least, at most
// kPartsPerThread per thread, 1 when the pool has one thread.
inline constexpr int kPartsPerThread = 4;
int PartsFor(double flops);

}  // namespace diloco::model
