// One GPU rank of an island (worker/island/): the NCCL communicator that joins this process's
// GPU to the other ranks' (ncclCommInitRankConfig, its unique id passed through the island's
// rendezvous), and the bounded all-reduce the GPT's TrainStep runs on it (GptCuda::UseRanks).
//
// Every wait is bounded. The communicator is non-blocking, so its creation and each all-reduce
// are polled (ncclCommGetAsyncError, then the stream's completion) until they finish, fail or
// the island's collective timeout passes; on failure or expiry the communicator is aborted
// (ncclCommAbort ends its kernels) and the error names this rank and the wait. A rank whose
// peer died or hangs so stops with an error instead of waiting forever; NCCL does not say
// which peer it lost.
//
// Plain C++17 without Abseil (gpt_cuda.h says why): errors are strings, empty on success.
// In a build without NCCL (no nccl.h at configure time) every call returns an error saying so.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

struct CUstream_st;
struct ncclComm;

namespace diloco::model::cuda {

constexpr size_t kNcclIdBytes = 128;  // NCCL_UNIQUE_ID_BYTES

// Whether NCCL loads (its error in *why when not).
bool NcclAvailable(std::string* why);

// A new communicator's id (ncclGetUniqueId, kNcclIdBytes bytes): rank 0 makes it, and every
// rank passes the same bytes to NcclRanks::Init.
std::string NcclUniqueId(std::string* id);

// Makes `device` the calling thread's current CUDA device: the one GptCuda::Create starts from.
std::string SelectDevice(int device);

// "2s", "0.5s": how the errors write a timeout.
std::string Seconds(double s);

class NcclRanks {
 public:
  // This process as rank `rank` of `size` on CUDA device `device`; each NCCL wait at most
  // `timeout_s` seconds.
  static std::string Init(const std::string& id, int rank, int size, int device, double timeout_s,
                          std::unique_ptr<NcclRanks>* out);
  ~NcclRanks();
  NcclRanks(const NcclRanks&) = delete;
  NcclRanks& operator=(const NcclRanks&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }

  // In place on `stream` (the current device's): the sum over the ranks of the `n` floats at
  // `data` (device memory), complete on return. The stream's earlier work is awaited first
  // (local, unbounded), then the all-reduce (bounded). `what` names it in errors.
  std::string AllReduceSum(float* data, size_t n, CUstream_st* stream, const char* what);

 private:
  NcclRanks() = default;
  // Polls until the communicator's pending work (and `stream`, when given) is done, an error
  // shows or the timeout passes.
  std::string Await(const char* what, CUstream_st* stream);
  std::string Abort(const std::string& why);

  ncclComm* comm_ = nullptr;
  int rank_ = 0, size_ = 1;
  double timeout_s_ = 30;
  bool aborted_ = false;
};

}  // namespace diloco::model::cuda
