// cuBLAS, loaded on first use with dlopen instead of linked. The worker binary carries the CUDA
// backend for --device=cuda; linked, cuBLAS (through cuBLASLt) costs every worker process its
// relocated private pages at start, GPU or not (Private_Dirty in /proc/PID/smaps_rollup of a
// CPU-only run shows them; no recorded measurement). Loaded here, only a process that creates a
// CUDA trainer pays it.
#pragma once

#include <cublas_v2.h>

#include <string>

namespace diloco::model::cuda {

// The entry points the GPT uses, with the library's own signatures.
struct CublasApi {
  decltype(&::cublasCreate_v2) create = nullptr;
  decltype(&::cublasDestroy_v2) destroy = nullptr;
  decltype(&::cublasSetStream_v2) set_stream = nullptr;
  decltype(&::cublasSetMathMode) set_math_mode = nullptr;
  decltype(&::cublasSgemm_v2) sgemm = nullptr;
  decltype(&::cublasSgemmStridedBatched) sgemm_strided_batched = nullptr;
};

// Loads libcublas.so.<the major version compiled against> once per process (where: see
// library_search.h) and resolves every entry point. Thread-safe. Null with *error saying what is
// missing.
const CublasApi* LoadCublas(std::string* error);

}  // namespace diloco::model::cuda
