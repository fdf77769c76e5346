#include "worker/model/cuda/nccl_ranks.h"

#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

#ifdef DILOCO_HAVE_NCCL
#include "worker/model/cuda/nccl_loader.h"
#endif

namespace diloco::model::cuda {

std::string Seconds(double s) {
  char text[32];
  std::snprintf(text, sizeof text, "%gs", s);
  return text;
}

std::string SelectDevice(int device) {
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess)
    return "cudaSetDevice(" + std::to_string(device) + "): " + cudaGetErrorString(e);
  return "";
}

#ifdef DILOCO_HAVE_NCCL

namespace {
const NcclApi* Api(std::string* why) { return LoadNccl(why); }
}  // namespace

bool NcclAvailable(std::string* why) { return Api(why) != nullptr; }

std::string NcclUniqueId(std::string* id) {
  std::string why;
  const NcclApi* api = Api(&why);
  if (api == nullptr) return why;
  ncclUniqueId u;
  if (ncclResult_t rc = api->get_unique_id(&u); rc != ncclSuccess)
    return std::string("ncclGetUniqueId: ") + api->error_string(rc);
  id->assign(u.internal, sizeof u.internal);
  return "";
}

std::string NcclRanks::Init(const std::string& id, int rank, int size, int device, double timeout_s,
                            std::unique_ptr<NcclRanks>* out) {
  std::string why;
  const NcclApi* api = Api(&why);
  if (api == nullptr) return why;
  if (id.size() != kNcclIdBytes)
    return "NCCL unique id of " + std::to_string(id.size()) + " bytes, expected " +
           std::to_string(kNcclIdBytes);
  if (std::string e = SelectDevice(device); !e.empty()) return e;
  std::unique_ptr<NcclRanks> r(new NcclRanks());
  r->rank_ = rank, r->size_ = size, r->timeout_s_ = timeout_s;
  ncclUniqueId u;
  std::memcpy(u.internal, id.data(), kNcclIdBytes);
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  const ncclResult_t rc = api->comm_init_rank_config(&comm, size, u, rank, &config);
  r->comm_ = comm;
  if (rc != ncclSuccess && rc != ncclInProgress) {
    std::string e = "rank " + std::to_string(rank) + " of " + std::to_string(size) +
                    ": ncclCommInitRankConfig: " + api->error_string(rc);
    if (comm != nullptr) api->comm_abort(comm);
    r->comm_ = nullptr;
    return e;
  }
  if (std::string e = r->Await("communicator creation", nullptr); !e.empty()) return e;
  *out = std::move(r);
  return "";
}

NcclRanks::~NcclRanks() {
  if (comm_ != nullptr && !aborted_) Api(nullptr)->comm_destroy(comm_);
}

std::string NcclRanks::Abort(const std::string& why) {
  if (!aborted_ && comm_ != nullptr) Api(nullptr)->comm_abort(comm_);
  aborted_ = true;
  return "rank " + std::to_string(rank_) + " of " + std::to_string(size_) + ": " + why;
}

std::string NcclRanks::Await(const char* what, CUstream_st* stream) {
  const NcclApi& api = *Api(nullptr);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s_);
  for (;;) {
    ncclResult_t state = ncclSuccess;
    if (ncclResult_t rc = api.comm_get_async_error(comm_, &state); rc != ncclSuccess) state = rc;
    if (state != ncclSuccess && state != ncclInProgress)
      return Abort(std::string("NCCL ") + what + " failed: " + api.error_string(state) +
                   " (a rank died or its link broke)");
    if (state == ncclSuccess) {
      if (stream == nullptr) return "";
      const cudaError_t e = cudaStreamQuery(stream);
      if (e == cudaSuccess) return "";
      if (e != cudaErrorNotReady)
        return Abort(std::string("NCCL ") + what + ": " + cudaGetErrorString(e));
    }
    if (std::chrono::steady_clock::now() >= deadline)
      return Abort(std::string("NCCL ") + what + " did not complete within " + Seconds(timeout_s_) +
                   " (a rank died or hangs)");
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

std::string NcclRanks::AllReduceSum(float* data, size_t n, CUstream_st* stream, const char* what) {
  if (aborted_) return Abort("the NCCL communicator was aborted after an earlier failure");
  if (cudaError_t e = cudaStreamSynchronize(stream); e != cudaSuccess)
    return std::string("before the NCCL ") + what + ": " + cudaGetErrorString(e);
  const NcclApi& api = *Api(nullptr);
  const ncclResult_t rc = api.all_reduce(data, data, n, ncclFloat, ncclSum, comm_, stream);
  if (rc != ncclSuccess && rc != ncclInProgress)
    return Abort(std::string("ncclAllReduce (") + what + "): " + api.error_string(rc));
  return Await(what, stream);
}

#else  // no NCCL in this build

namespace {
constexpr char kNoNccl[] =
    "this CUDA build has no NCCL (nccl.h was not found when it was configured): GPU islands "
    "across processes need it";
}  // namespace

bool NcclAvailable(std::string* why) {
  if (why != nullptr) *why = kNoNccl;
  return false;
}
std::string NcclUniqueId(std::string*) { return kNoNccl; }
std::string NcclRanks::Init(const std::string&, int, int, int, double,
                            std::unique_ptr<NcclRanks>*) {
  return kNoNccl;
}
NcclRanks::~NcclRanks() = default;
std::string NcclRanks::Abort(const std::string& why) { return why; }
std::string NcclRanks::Await(const char*, CUstream_st*) { return kNoNccl; }
std::string NcclRanks::AllReduceSum(float*, size_t, CUstream_st*, const char*) { return kNoNccl; }

#endif

}  // namespace diloco::model::cuda
