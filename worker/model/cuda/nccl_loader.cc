#include "worker/model/cuda/nccl_loader.h"

#include "worker/model/cuda/library_search.h"

namespace diloco::model::cuda {
namespace {

#define DILOCO_STR2(x) #x
#define DILOCO_STR(x) DILOCO_STR2(x)
constexpr char kSoname[] = "libnccl.so." DILOCO_STR(NCCL_MAJOR);

struct Loaded {
  NcclApi api;
  std::string error;  // empty when api is complete
};

Loaded Load() {
  Loaded l;
  void* lib = OpenCudaLibrary(kSoname, "nccl", &l.error);
  if (lib == nullptr) return l;
  std::string missing;
  ResolveSymbol(lib, "ncclCommInitAll", &l.api.comm_init_all, &missing);
  ResolveSymbol(lib, "ncclCommDestroy", &l.api.comm_destroy, &missing);
  ResolveSymbol(lib, "ncclGroupStart", &l.api.group_start, &missing);
  ResolveSymbol(lib, "ncclGroupEnd", &l.api.group_end, &missing);
  ResolveSymbol(lib, "ncclAllReduce", &l.api.all_reduce, &missing);
  ResolveSymbol(lib, "ncclGetErrorString", &l.api.error_string, &missing);
  if (!missing.empty()) l.error = std::string(kSoname) + " lacks " + missing;
  return l;  // the library stays loaded for the process's life
}

}  // namespace

const NcclApi* LoadNccl(std::string* error) {
  static const Loaded loaded = Load();  // once, thread-safe
  if (!loaded.error.empty()) {
    if (error != nullptr) *error = loaded.error;
    return nullptr;
  }
  return &loaded.api;
}

}  // namespace diloco::model::cuda
