// NCCL, loaded on first use with dlopen instead of linked: only a worker training on more than
// one GPU (--gpus > 1, or one rank of a GPU island: nccl_ranks.h) needs it, so a CUDA-built worker
// starts, and trains on one GPU or on the CPU, where NCCL is not installed. Where it is looked for:
// library_search.h.
#pragma once

#include <nccl.h>

#include <string>

namespace diloco::model::cuda {

// The entry points the data-parallel GPT and an island's ranks use, with the library's own
// signatures.
struct NcclApi {
  decltype(&::ncclCommInitAll) comm_init_all = nullptr;
  decltype(&::ncclCommDestroy) comm_destroy = nullptr;
  decltype(&::ncclGroupStart) group_start = nullptr;
  decltype(&::ncclGroupEnd) group_end = nullptr;
  decltype(&::ncclAllReduce) all_reduce = nullptr;
  decltype(&::ncclGetErrorString) error_string = nullptr;
  decltype(&::ncclGetUniqueId) get_unique_id = nullptr;
  decltype(&::ncclCommInitRankConfig) comm_init_rank_config = nullptr;
  decltype(&::ncclCommAbort) comm_abort = nullptr;
  decltype(&::ncclCommGetAsyncError) comm_get_async_error = nullptr;
};

// Loads libnccl.so.<the major version compiled against> once per process and resolves every
// entry point. Thread-safe. Null with *error saying what is missing and where it was looked for.
const NcclApi* LoadNccl(std::string* error);

}  // namespace diloco::model::cuda
