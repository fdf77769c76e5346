// An island's GPU ranks (worker/model/cuda/nccl_ranks.h): NCCL's rank entry points resolve, the
// unique id is 128 bytes, a rank alone sums to itself, a communicator whose peer never comes
// and an all-reduce whose peer never joins both fail within the timeout, naming the rank and
// the wait; with two GPUs, two ranks (threads) sum. The GPU parts skip without a GPU, the
// two-rank ones without two (NCCL takes no two ranks on one device).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "worker/model/cuda/cuda_trainer.h"
#include "worker/model/cuda/nccl_ranks.h"
#ifdef DILOCO_HAVE_NCCL
#include "worker/model/cuda/nccl_loader.h"
#endif

namespace diloco::model::cuda {
namespace {

using Clock = std::chrono::steady_clock;

#ifdef DILOCO_HAVE_NCCL
#define SKIP_WITHOUT(gpus) \
  if (CudaDeviceCount() < (gpus)) GTEST_SKIP() << "needs " << (gpus) << " GPU(s)"
#else
#define SKIP_WITHOUT(gpus) GTEST_SKIP() << "a build without NCCL"
#endif

double SecondsSince(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

#ifdef DILOCO_HAVE_NCCL
TEST(NcclRanksTest, TheLoaderResolvesTheRankEntryPoints) {
  std::string error;
  const NcclApi* api = LoadNccl(&error);
  if (api == nullptr && CudaDeviceCount() < 1) GTEST_SKIP() << "no GPU and " << error;
  ASSERT_NE(api, nullptr) << error;
  EXPECT_NE(api->get_unique_id, nullptr);
  EXPECT_NE(api->comm_init_rank_config, nullptr);
  EXPECT_NE(api->comm_abort, nullptr);
  EXPECT_NE(api->comm_get_async_error, nullptr);
}
#endif

TEST(NcclRanksTest, TheUniqueIdIs128Bytes) {
#ifndef DILOCO_HAVE_NCCL
  GTEST_SKIP() << "a build without NCCL";
#endif
  std::string id, why;
  if (!NcclAvailable(&why) && CudaDeviceCount() < 1) GTEST_SKIP() << "no GPU and " << why;
  const std::string e = NcclUniqueId(&id);
  if (!e.empty() && CudaDeviceCount() < 1) GTEST_SKIP() << "no GPU and " << e;
  ASSERT_EQ(e, "");
  EXPECT_EQ(id.size(), kNcclIdBytes);
  std::string again;
  ASSERT_EQ(NcclUniqueId(&again), "");
  EXPECT_NE(again, id) << "every communicator has its own id";
}

// A buffer of `n` floats on device `device`, filled with `values`.
struct DeviceFloats {
  DeviceFloats(int device, const std::vector<float>& values) {
    EXPECT_EQ(cudaSetDevice(device), cudaSuccess);
    EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&data, values.size() * sizeof(float)), cudaSuccess);
    EXPECT_EQ(
        cudaMemcpy(data, values.data(), values.size() * sizeof(float), cudaMemcpyHostToDevice),
        cudaSuccess);
    n = values.size();
  }
  ~DeviceFloats() {
    cudaFree(data);
    cudaStreamDestroy(stream);
  }
  std::vector<float> Read() const {
    std::vector<float> out(n);
    EXPECT_EQ(cudaMemcpy(out.data(), data, n * sizeof(float), cudaMemcpyDeviceToHost), cudaSuccess);
    return out;
  }
  float* data = nullptr;
  size_t n = 0;
  cudaStream_t stream = nullptr;
};

std::string Id() {
  std::string id;
  const std::string e = NcclUniqueId(&id);
  EXPECT_EQ(e, "");
  return id;
}

TEST(NcclRanksTest, ARankAloneSumsToItself) {
  SKIP_WITHOUT(1);
  const std::string id = Id();
  ASSERT_EQ(id.size(), kNcclIdBytes);
  std::unique_ptr<NcclRanks> ranks;
  ASSERT_EQ(NcclRanks::Init(id, 0, 1, 0, 20, &ranks), "");
  const std::vector<float> values = {1.5f, -2.f, 3.25f, 0.f, 1e6f};
  DeviceFloats d(0, values);
  ASSERT_EQ(ranks->AllReduceSum(d.data, d.n, d.stream, "all-reduce"), "");
  EXPECT_EQ(d.Read(), values);
}

TEST(NcclRanksTest, ACommunicatorWhosePeerNeverComesFailsWithinTheTimeout) {
  SKIP_WITHOUT(1);
  std::unique_ptr<NcclRanks> ranks;
  const auto t0 = Clock::now();
  const std::string e = NcclRanks::Init(Id(), 0, 2, 0, 3, &ranks);
  EXPECT_LT(SecondsSince(t0), 15);
  EXPECT_EQ(ranks, nullptr);
  EXPECT_NE(e.find("rank 0 of 2: NCCL communicator creation"), std::string::npos) << e;
}

TEST(NcclRanksTest, TwoRanksSumAndARankWhosePeerStopsFailsWithinTheTimeout) {
  SKIP_WITHOUT(2);
  const std::string id = Id();
  std::vector<std::unique_ptr<NcclRanks>> ranks(2);
  std::vector<std::string> init(2), sum(2), lost(2);
  std::vector<std::vector<float>> got(2);
  double waited = 0;
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r)
    threads.emplace_back([&, r] {
      init[r] = NcclRanks::Init(id, r, 2, r, 5, &ranks[r]);
      if (!init[r].empty()) return;
      DeviceFloats d(r, {float(r + 1), float(10 * (r + 1))});
      sum[r] = ranks[r]->AllReduceSum(d.data, d.n, d.stream, "all-reduce");
      got[r] = d.Read();
      if (r == 1) return;  // rank 1 stops taking part: rank 0's next all-reduce waits in vain
      const auto t0 = Clock::now();
      lost[r] = ranks[r]->AllReduceSum(d.data, d.n, d.stream, "all-reduce of the gradients");
      waited = SecondsSince(t0);
    });
  for (std::thread& t : threads) t.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(init[r], "") << "rank " << r;
    EXPECT_EQ(sum[r], "") << "rank " << r;
    EXPECT_EQ(got[r], (std::vector<float>{3.f, 30.f})) << "rank " << r;
  }
  EXPECT_NE(lost[0].find("rank 0 of 2: NCCL all-reduce of the gradients did not complete within "
                         "5s (a rank died or hangs)"),
            std::string::npos)
      << lost[0];
  EXPECT_LT(waited, 15);
}

}  // namespace
}  // namespace diloco::model::cuda
