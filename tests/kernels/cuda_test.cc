// CUDA kernels against the CPU reference, byte for byte. Every test skips when no GPU is usable
// (cudaGetDeviceCount failing for any reason, e.g. no driver, counts as no GPU).
#include "kernels/cuda.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/codec.h"
#include "kernels/optim.h"
#include "kernels/reference.h"
#include "tests/kernels/test_data.h"

namespace diloco::kernels {
namespace {

using testing::Bits;

bool HaveGpu() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" error
    return false;
  }
  return count > 0;
}

#define SKIP_WITHOUT_GPU() \
  if (!HaveGpu()) GTEST_SKIP() << "no usable CUDA device"

#define CUDA_OK(expr) ASSERT_EQ((expr), cudaSuccess) << #expr

// A device buffer holding a copy of a host vector (at least 16 bytes, so never null).
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) : bytes_(bytes) {
    EXPECT_EQ(cudaMalloc(&p_, bytes < 16 ? 16 : bytes), cudaSuccess);
  }
  template <typename T>
  explicit DeviceBuffer(const std::vector<T>& host) : DeviceBuffer(host.size() * sizeof(T)) {
    if (bytes_ > 0) {
      EXPECT_EQ(cudaMemcpy(p_, host.data(), bytes_, cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  template <typename T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  template <typename T>
  std::vector<T> ToHost() const {
    std::vector<T> h(bytes_ / sizeof(T));
    if (bytes_ > 0) {
      EXPECT_EQ(cudaMemcpy(h.data(), p_, bytes_, cudaMemcpyDeviceToHost), cudaSuccess);
    }
    return h;
  }

 private:
  void* p_ = nullptr;
  size_t bytes_;
};

using Param = std::tuple<CodecKind, uint32_t, size_t>;

class CudaCodec : public ::testing::TestWithParam<Param> {
 protected:
  Codec codec() const { return Codec{std::get<0>(GetParam()), std::get<1>(GetParam())}; }
  size_t n() const { return std::get<2>(GetParam()); }
};

TEST_P(CudaCodec, EncodeDecodeAndAccumulateMatchReference) {
  SKIP_WITHOUT_GPU();
  const Codec c = codec();
  const std::vector<float> x = testing::BlockyData(n(), c.block, 11);
  std::vector<uint8_t> want(EncodedSize(c, n()));
  ASSERT_TRUE(ref::Encode(c, x, want).ok());

  DeviceBuffer dx(x), dout(want.size()), dflag(sizeof(int));
  CUDA_OK(cudaMemset(dflag.as<int>(), 0, sizeof(int)));
  CUDA_OK(cuda::Encode(c, dx.as<float>(), n(), dout.as<uint8_t>(), dflag.as<int>(), nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(dout.ToHost<uint8_t>(), want);
  EXPECT_EQ(dflag.ToHost<int>()[0], 0);

  std::vector<float> want_dec(n());
  ASSERT_TRUE(ref::Decode(c, want, want_dec).ok());
  DeviceBuffer denc(want), ddec(n() * sizeof(float));
  CUDA_OK(cuda::Decode(c, denc.as<uint8_t>(), n(), ddec.as<float>(), nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> dec = ddec.ToHost<float>();
  for (size_t i = 0; i < n(); ++i) ASSERT_EQ(Bits(dec[i]), Bits(want_dec[i])) << i;

  std::vector<float> acc = testing::Gaussian(n(), 12);
  DeviceBuffer dacc(acc);
  ASSERT_TRUE(ref::DecodeAccumulate(c, want, 0.37f, acc).ok());
  CUDA_OK(cuda::DecodeAccumulate(c, denc.as<uint8_t>(), n(), 0.37f, dacc.as<float>(), nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> got_acc = dacc.ToHost<float>();
  for (size_t i = 0; i < n(); ++i) ASSERT_EQ(Bits(got_acc[i]), Bits(acc[i])) << i;
}

TEST_P(CudaCodec, ErrorFeedbackMatchesReference) {
  SKIP_WITHOUT_GPU();
  const Codec c = codec();
  std::vector<float> err(n(), 0.0f);
  DeviceBuffer derr(err), dout(EncodedSize(c, n()));
  std::vector<uint8_t> want(EncodedSize(c, n()));
  for (uint32_t round = 0; round < 3; ++round) {
    const std::vector<float> delta = testing::BlockyData(n(), c.block, 20 + round);
    ASSERT_TRUE(ref::ErrorFeedbackEncode(c, delta, err, want).ok());
    DeviceBuffer ddelta(delta);
    CUDA_OK(cuda::ErrorFeedbackEncode(c, ddelta.as<float>(), derr.as<float>(), n(),
                                      dout.as<uint8_t>(), nullptr, nullptr));
    CUDA_OK(cudaDeviceSynchronize());
    EXPECT_EQ(dout.ToHost<uint8_t>(), want) << "round " << round;
    const std::vector<float> got = derr.ToHost<float>();
    for (size_t i = 0; i < n(); ++i) ASSERT_EQ(Bits(got[i]), Bits(err[i])) << round << " " << i;
  }
}

TEST_P(CudaCodec, NonFiniteIsFlagged) {
  SKIP_WITHOUT_GPU();
  // n = 0 runs too (nothing to poison, so the flag must stay 0) rather than skipping:
  // benchmarks/kernels/gpu_check.sh fails the run on any SKIPPED test.
  std::vector<float> x = testing::BlockyData(n(), codec().block, 30);
  if (n() > 0) x[n() / 2] = std::numeric_limits<float>::quiet_NaN();
  DeviceBuffer dx(x), dout(EncodedSize(codec(), n())), dflag(sizeof(int));
  CUDA_OK(cudaMemset(dflag.as<int>(), 0, sizeof(int)));
  CUDA_OK(cuda::Encode(codec(), dx.as<float>(), n(), dout.as<uint8_t>(), dflag.as<int>(), nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  EXPECT_EQ(dflag.ToHost<int>()[0], n() > 0 ? 1 : 0);
}

std::string Name(const ::testing::TestParamInfo<Param>& info) {
  static const char* kinds[] = {"fp32", "bf16", "fp8", "int8", "int4"};
  return std::string(kinds[static_cast<int>(std::get<0>(info.param))]) + "_b" +
         std::to_string(std::get<1>(info.param)) + "_n" + std::to_string(std::get<2>(info.param));
}

INSTANTIATE_TEST_SUITE_P(
    AllCodecs, CudaCodec,
    ::testing::Combine(::testing::Values(CodecKind::kFp32, CodecKind::kBf16, CodecKind::kFp8E4M3,
                                         CodecKind::kInt8, CodecKind::kInt4),
                       // 72 and 200: blocks that are not a multiple of the lane group's 8 * G
                       // values for G = 8 and G = 16 (1000 does that for G = 32).
                       ::testing::Values(64u, 72u, 128u, 200u, 256u, 1000u, 2048u),
                       ::testing::Values(size_t{0}, size_t{1}, size_t{63}, size_t{1000},
                                         size_t{2049}, size_t{100003}, size_t{(1 << 22) + 5})),
    Name);

TEST(CudaCodecApi, RefusesMisalignedPointersAndBadCodec) {
  SKIP_WITHOUT_GPU();
  DeviceBuffer dx(1024), dout(1024);
  EXPECT_EQ(cuda::Encode(Codec{CodecKind::kInt8, 100}, dx.as<float>(), 10, dout.as<uint8_t>(),
                         nullptr, nullptr),
            cudaErrorInvalidValue);
  EXPECT_EQ(cuda::Encode(Codec{}, dx.as<float>() + 1, 10, dout.as<uint8_t>(), nullptr, nullptr),
            cudaErrorInvalidValue);
}

class CudaOptim : public ::testing::TestWithParam<size_t> {};

TEST_P(CudaOptim, MatchesReferenceBits) {
  SKIP_WITHOUT_GPU();
  const size_t n = GetParam();
  const std::vector<float> d = testing::Gaussian(n, 1), g = testing::Gaussian(n, 2);
  std::vector<float> theta = testing::Gaussian(n, 3), m = testing::Gaussian(n, 4);
  std::vector<float> v(n, 0.01f);
  DeviceBuffer dd(d), dg(g), dtheta(theta), dm(m), dv(v);
  ref::NesterovStep(NesterovParams{}, theta, m, d);
  CUDA_OK(cuda::NesterovStep(NesterovParams{}, dtheta.as<float>(), dm.as<float>(), dd.as<float>(),
                             n, nullptr));
  for (int64_t step = 1; step <= 3; ++step) {
    ref::AdamWStep(AdamWParams{}, step, theta, g, m, v);
    CUDA_OK(cuda::AdamWStep(AdamWParams{}, step, dtheta.as<float>(), dg.as<float>(), dm.as<float>(),
                            dv.as<float>(), n, nullptr));
  }
  std::vector<float> delta(n);
  ref::Delta(d, g, delta);
  DeviceBuffer ddelta(n * sizeof(float));
  CUDA_OK(cuda::Delta(dd.as<float>(), dg.as<float>(), ddelta.as<float>(), n, nullptr));
  ref::LerpAdopt(d, delta, 0.3f);
  CUDA_OK(cuda::LerpAdopt(dd.as<float>(), ddelta.as<float>(), 0.3f, n, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> t = dtheta.ToHost<float>(), mm = dm.ToHost<float>(),
                           vv = dv.ToHost<float>(), de = ddelta.ToHost<float>();
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(Bits(t[i]), Bits(theta[i])) << i;
    ASSERT_EQ(Bits(mm[i]), Bits(m[i])) << i;
    ASSERT_EQ(Bits(vv[i]), Bits(v[i])) << i;
    ASSERT_EQ(Bits(de[i]), Bits(delta[i])) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Sizes, CudaOptim,
                         ::testing::Values(size_t{1}, size_t{1001}, size_t{(1 << 22) + 3}));

}  // namespace
}  // namespace diloco::kernels
