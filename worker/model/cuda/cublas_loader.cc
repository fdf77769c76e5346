#include "worker/model/cuda/cublas_loader.h"

#include "worker/model/cuda/library_search.h"

namespace diloco::model::cuda {
namespace {

#define DILOCO_STR2(x) #x
#define DILOCO_STR(x) DILOCO_STR2(x)
constexpr char kSoname[] = "libcublas.so." DILOCO_STR(CUBLAS_VER_MAJOR);

void Resolve(void* lib, CublasApi* a, std::string* missing) {
  ResolveSymbol(lib, "cublasCreate_v2", &a->create, missing);
  ResolveSymbol(lib, "cublasDestroy_v2", &a->destroy, missing);
  ResolveSymbol(lib, "cublasSetStream_v2", &a->set_stream, missing);
  ResolveSymbol(lib, "cublasSetMathMode", &a->set_math_mode, missing);
  ResolveSymbol(lib, "cublasSgemm_v2", &a->sgemm, missing);
  ResolveSymbol(lib, "cublasSgemmStridedBatched", &a->sgemm_strided_batched, missing);
}

}  // namespace

const CublasApi* LoadCublas(std::string* error) {
  static const LoadedApi<CublasApi> loaded = LoadApi<CublasApi>(kSoname, "cublas", Resolve);
  return loaded.Get(error);
}

}  // namespace diloco::model::cuda
