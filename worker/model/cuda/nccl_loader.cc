#include "worker/model/cuda/nccl_loader.h"

#include "worker/model/cuda/library_search.h"

namespace diloco::model::cuda {
namespace {

#define DILOCO_STR2(x) #x
#define DILOCO_STR(x) DILOCO_STR2(x)
constexpr char kSoname[] = "libnccl.so." DILOCO_STR(NCCL_MAJOR);

void Resolve(void* lib, NcclApi* a, std::string* missing) {
  ResolveSymbol(lib, "ncclCommInitAll", &a->comm_init_all, missing);
  ResolveSymbol(lib, "ncclCommDestroy", &a->comm_destroy, missing);
  ResolveSymbol(lib, "ncclGroupStart", &a->group_start, missing);
  ResolveSymbol(lib, "ncclGroupEnd", &a->group_end, missing);
  ResolveSymbol(lib, "ncclAllReduce", &a->all_reduce, missing);
  ResolveSymbol(lib, "ncclGetErrorString", &a->error_string, missing);
  ResolveSymbol(lib, "ncclGetUniqueId", &a->get_unique_id, missing);
  ResolveSymbol(lib, "ncclCommInitRankConfig", &a->comm_init_rank_config, missing);
  ResolveSymbol(lib, "ncclCommAbort", &a->comm_abort, missing);
  ResolveSymbol(lib, "ncclCommGetAsyncError", &a->comm_get_async_error, missing);
}

}  // namespace

const NcclApi* LoadNccl(std::string* error) {
  static const LoadedApi<NcclApi> loaded = LoadApi<NcclApi>(kSoname, "nccl", Resolve);
  return loaded.Get(error);
}

}  // namespace diloco::model::cuda
