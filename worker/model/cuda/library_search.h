// Finding a CUDA library (cuBLAS, NCCL) at run time instead of linking it, so that a CUDA-built
// program starts on a machine that has none of them: it needs one only when it trains on a GPU
// (cuBLAS) or on several (NCCL). The CUDA runtime itself is linked statically (cmake/Cuda.cmake)
// and loads the driver (libcuda.so.1) only when first asked about a device.
//
// Where a library is looked for, in order (each path tried is named in the error):
//   1. the dynamic loader's own search (LD_LIBRARY_PATH, ld.so.cache, the run path);
//   2. the build machine's toolkit folder, $CUDA_HOME (or $CUDA_PATH)/lib64, and the folders
//      toolkits install to (/usr/local/cuda/lib64, .../targets/x86_64-linux/lib, .../lib);
//   3. nvidia/<wheel>/lib in Python's package folders ($VIRTUAL_ENV, $CONDA_PREFIX, ~/.local,
//      /usr/local/lib/python3*, /usr/lib/python3*), where PyTorch's CUDA wheels put them.
#pragma once

#include <dlfcn.h>

#include <string>
#include <vector>

namespace diloco::model::cuda {

// The folders of steps 2 and 3 above for `wheel` (the package folder under nvidia/, e.g.
// "cublas", "nccl"), in the order they are tried; only those that exist.
std::vector<std::string> CudaLibraryFolders(const char* wheel);

// dlopen(soname) through the loader, then in each of CudaLibraryFolders(wheel). The handle
// (RTLD_NOW | RTLD_LOCAL, kept for the process's life), or null with *error naming the library,
// every path tried and the loader's last reason.
void* OpenCudaLibrary(const std::string& soname, const char* wheel, std::string* error);

// *out = the symbol `name` of lib; when it is absent, `name` is appended to *missing
// (comma-separated), so that one error lists every entry point a library lacks.
template <typename Fn>
void ResolveSymbol(void* lib, const char* name, Fn* out, std::string* missing) {
  *out = reinterpret_cast<Fn>(dlsym(lib, name));
  if (*out == nullptr) *missing += std::string(missing->empty() ? "" : ", ") + name;
}

// A library's table of entry points (Api), or why there is none.
template <typename Api>
struct LoadedApi {
  Api api;
  std::string error;  // empty when api is complete

  // &api, or null with *error (when given) set.
  const Api* Get(std::string* why) const {
    if (error.empty()) return &api;
    if (why != nullptr) *why = error;
    return nullptr;
  }
};

// Opens `soname` (OpenCudaLibrary) and fills the table: resolve(lib, &api, &missing) calls
// ResolveSymbol for each entry point. The library stays loaded for the process's life. Call
// once, from a function-local static (thread-safe).
template <typename Api, typename Resolve>
LoadedApi<Api> LoadApi(const std::string& soname, const char* wheel, Resolve resolve) {
  LoadedApi<Api> l;
  void* lib = OpenCudaLibrary(soname, wheel, &l.error);
  if (lib == nullptr) return l;
  std::string missing;
  resolve(lib, &l.api, &missing);
  if (!missing.empty()) l.error = soname + " lacks " + missing;
  return l;
}

}  // namespace diloco::model::cuda
