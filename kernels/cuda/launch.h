// Launch helpers shared by the CUDA kernels: grid sizing for grid-stride loops and argument
// checks done on the host before any launch.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace diloco::kernels::cuda::detail {

inline constexpr int kThreads = 256;

// One full wave of resident blocks (2048 threads per SM on sm_90, so 8 blocks of kThreads): the
// grid-stride loops then keep every SM busy to the end with no tail wave; never more blocks
// than the work needs.
inline unsigned GridFor(size_t work_items, size_t items_per_block) {
  int device = 0;
  int sms = 132;
  if (cudaGetDevice(&device) == cudaSuccess) {
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  }
  const size_t need = (work_items + items_per_block - 1) / items_per_block;
  const size_t cap = static_cast<size_t>(sms) * (2048 / kThreads);
  const size_t g = need < cap ? need : cap;
  return static_cast<unsigned>(g == 0 ? 1 : g);
}

inline bool Aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace diloco::kernels::cuda::detail
