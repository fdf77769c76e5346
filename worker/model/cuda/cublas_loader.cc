#include "worker/model/cuda/cublas_loader.h"

#include "worker/model/cuda/library_search.h"

namespace diloco::model::cuda {
namespace {

#define DILOCO_STR2(x) #x
#define DILOCO_STR(x) DILOCO_STR2(x)
constexpr char kSoname[] = "libcublas.so." DILOCO_STR(CUBLAS_VER_MAJOR);

struct Loaded {
  CublasApi api;
  std::string error;  // empty when api is complete
};

Loaded Load() {
  Loaded l;
  void* lib = OpenCudaLibrary(kSoname, "cublas", &l.error);
  if (lib == nullptr) return l;
  std::string missing;
  ResolveSymbol(lib, "cublasCreate_v2", &l.api.create, &missing);
  ResolveSymbol(lib, "cublasDestroy_v2", &l.api.destroy, &missing);
  ResolveSymbol(lib, "cublasSetStream_v2", &l.api.set_stream, &missing);
  ResolveSymbol(lib, "cublasSetMathMode", &l.api.set_math_mode, &missing);
  ResolveSymbol(lib, "cublasSgemm_v2", &l.api.sgemm, &missing);
  ResolveSymbol(lib, "cublasSgemmStridedBatched", &l.api.sgemm_strided_batched, &missing);
  if (!missing.empty()) l.error = std::string(kSoname) + " lacks " + missing;
  return l;  // the library stays loaded for the process's life
}

}  // namespace

const CublasApi* LoadCublas(std::string* error) {
  static const Loaded loaded = Load();  // once, thread-safe
  if (!loaded.error.empty()) {
    if (error != nullptr) *error = loaded.error;
    return nullptr;
  }
  return &loaded.api;
}

}  // namespace diloco::model::cuda
