// Launch helpers shared by the CUDA kernels (.cu files only): grid sizing for grid-stride loops,
// the launch itself, and argument checks done on the host before any launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <utility>

namespace diloco::kernels::cuda::detail {

inline constexpr int kThreads = 256;

// One full wave of resident blocks of `kernel` (as many of its kThreads-blocks as fit on each SM
// at once, by the occupancy calculator: 8 on sm_90 for a light kernel, 4-5 for the quantizers
// with 43-64 registers a thread): the grid-stride loops then keep every SM busy to the end with
// no tail wave; never more blocks than the work needs. Asked on every launch (a host-side
// calculation, no synchronisation), so GPUs of different kinds in one process each get theirs.
// An error already pending from an earlier launch is left pending for its caller to report: the
// queries are then skipped (the default sizes serve), since clearing their own failures would
// clear it too.
inline unsigned GridFor(const void* kernel, size_t work_items, size_t items_per_block) {
  int device = 0, sms = 132, per_sm = 2048 / kThreads;
  if (cudaPeekAtLastError() == cudaSuccess) {
    if (cudaGetDevice(&device) != cudaSuccess ||
        cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
      sms = 132;
    }
    int fit = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, kernel, kThreads, 0) == cudaSuccess &&
        fit > 0) {
      per_sm = fit;
    }
    (void)cudaGetLastError();  // a failed query above must not be reported as the launch's error
  }
  const size_t need = (work_items + items_per_block - 1) / items_per_block;
  const size_t cap = static_cast<size_t>(sms) * static_cast<size_t>(per_sm);
  const size_t g = need < cap ? need : cap;
  return static_cast<unsigned>(g == 0 ? 1 : g);
}

// kernel<<<one full wave for `work_items`, kThreads, 0, stream>>>(args...).
template <typename... Params, typename... Args>
void LaunchWave(void (*kernel)(Params...), size_t work_items, size_t items_per_block,
                cudaStream_t stream, Args&&... args) {
  const unsigned grid = GridFor(reinterpret_cast<const void*>(kernel), work_items, items_per_block);
  kernel<<<grid, kThreads, 0, stream>>>(std::forward<Args>(args)...);
}

inline bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace diloco::kernels::cuda::detail
