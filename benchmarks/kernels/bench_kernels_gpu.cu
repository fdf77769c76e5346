// diloco-bench-kernels-gpu: throughput of the CUDA kernels against the device-to-device
// cudaMemcpy ceiling measured in the same run, timed with CUDA events.
//
// "Bytes touched" per op (n values, E = encoded bytes), as in the CPU benchmark:
//   D2D copy (ceiling)   4n read + 4n written          = 8n
//   Encode               4n + E
//   Decode               E + 4n
//   DecodeAccumulate     E + 8n
//   ErrorFeedbackEncode  12n + E
//   NesterovStep 20n, AdamWStep 28n
// Also: pinned host<->device copy time of each codec's encoded payload (E bytes).
//
// Usage: diloco-bench-kernels-gpu [--n=268435456] [--reps=10] [--block=256]
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "kernels/codec_kind.h"
#include "kernels/cuda.h"

namespace {

using diloco::kernels::Codec;
using diloco::kernels::CodecKind;
namespace kc = diloco::kernels::cuda;

#define CHECK_CUDA(expr)                                                                         \
  do {                                                                                           \
    const cudaError_t e_ = (expr);                                                               \
    if (e_ != cudaSuccess) {                                                                     \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #expr, cudaGetErrorString(e_)); \
      std::exit(1);                                                                              \
    }                                                                                            \
  } while (0)

// Random values in (-scale, scale), never zero: an odd 32-bit hash times 2^-31.
__global__ void FillRandom(float* x, size_t n, uint32_t seed, float scale) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 0x9E3779B1u ^ seed ^ static_cast<uint32_t>(i >> 32);
    h ^= h >> 16;
    h *= 0x85EBCA6Bu;
    h ^= h >> 13;
    h *= 0xC2B2AE35u;
    h ^= h >> 16;
    const int32_t v = static_cast<int32_t>(h | 1u);
    x[i] = static_cast<float>(v) * (scale / 2147483648.0f);
  }
}

struct Timer {
  cudaEvent_t a, b;
  Timer() {
    CHECK_CUDA(cudaEventCreate(&a));
    CHECK_CUDA(cudaEventCreate(&b));
  }
  ~Timer() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  // Mean milliseconds of `reps` runs after one warm-up.
  template <typename F>
  float Ms(int reps, F&& f) {
    CHECK_CUDA(f());
    CHECK_CUDA(cudaDeviceSynchronize());
    CHECK_CUDA(cudaEventRecord(a));
    for (int r = 0; r < reps; ++r) CHECK_CUDA(f());
    CHECK_CUDA(cudaEventRecord(b));
    CHECK_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    CHECK_CUDA(cudaEventElapsedTime(&ms, a, b));
    return ms / reps;
  }
};

double g_ceiling = 0;

void Report(const char* op, const std::string& codec, double bytes, float ms) {
  const double gbs = bytes / (ms * 1e-3) / 1e9;
  std::printf("%-22s %-10s %9.3f ms %9.1f GB/s  %5.2f x copy\n", op, codec.c_str(), ms, gbs,
              g_ceiling > 0 ? gbs / g_ceiling : 1.0);
}

std::string Name(Codec c) {
  static const char* kinds[] = {"fp32", "bf16", "fp8", "int8", "int4"};
  std::string s = kinds[static_cast<int>(c.kind)];
  if (diloco::kernels::HasScales(c.kind)) s += ":" + std::to_string(c.block);
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  size_t n = size_t{256} << 20;
  int reps = 10;
  uint32_t block = 256;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--n=", 4) == 0) n = std::strtoull(argv[i] + 4, nullptr, 10);
    if (std::strncmp(argv[i], "--reps=", 7) == 0) reps = std::atoi(argv[i] + 7);
    if (std::strncmp(argv[i], "--block=", 8) == 0) block = std::strtoul(argv[i] + 8, nullptr, 10);
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "no usable CUDA device\n");
    return 2;
  }
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  std::printf(
      "diloco-bench-kernels-gpu: %s (%d SMs), n=%zu floats (%.0f MiB per buffer), "
      "reps=%d (mean), block=%u\n",
      prop.name, prop.multiProcessorCount, n, n * 4.0 / (1 << 20), reps, block);

  float *x, *y, *z, *w;
  uint8_t* enc;
  int* flag;
  CHECK_CUDA(cudaMalloc(&x, n * 4));
  CHECK_CUDA(cudaMalloc(&y, n * 4));
  CHECK_CUDA(cudaMalloc(&z, n * 4));
  CHECK_CUDA(cudaMalloc(&w, n * 4));
  CHECK_CUDA(cudaMalloc(&enc, n * 4));
  CHECK_CUDA(cudaMalloc(&flag, sizeof(int)));
  CHECK_CUDA(cudaMemset(flag, 0, sizeof(int)));
  FillRandom<<<1024, 256>>>(x, n, 1, 1.0f);
  FillRandom<<<1024, 256>>>(y, n, 2, 1.0f);
  FillRandom<<<1024, 256>>>(z, n, 3, 1e-2f);
  FillRandom<<<1024, 256>>>(w, n, 4, 1e-4f);
  CHECK_CUDA(cudaGetLastError());
  CHECK_CUDA(cudaDeviceSynchronize());
  uint8_t* pinned;
  CHECK_CUDA(cudaMallocHost(&pinned, n * 4));

  Timer t;
  const double fn = static_cast<double>(n);
  const float copy_ms =
      t.Ms(reps, [&] { return cudaMemcpyAsync(y, x, n * 4, cudaMemcpyDeviceToDevice); });
  g_ceiling = 8 * fn / (copy_ms * 1e-3) / 1e9;
  Report("D2D copy (ceiling)", "-", 8 * fn, copy_ms);

  for (CodecKind kind : {CodecKind::kFp32, CodecKind::kBf16, CodecKind::kFp8E4M3, CodecKind::kInt8,
                         CodecKind::kInt4}) {
    const Codec c{kind, block};
    const std::string name = Name(c);
    const double e = static_cast<double>(diloco::kernels::EncodedBytes(c, n));
    Report("Encode", name, 4 * fn + e,
           t.Ms(reps, [&] { return kc::Encode(c, x, n, enc, flag, 0); }));
    Report("Decode", name, 4 * fn + e, t.Ms(reps, [&] { return kc::Decode(c, enc, n, y, 0); }));
    Report("DecodeAccumulate", name, 8 * fn + e,
           t.Ms(reps, [&] { return kc::DecodeAccumulate(c, enc, n, 1e-3f, y, 0); }));
    CHECK_CUDA(cudaMemset(w, 0, n * 4));
    Report("ErrorFeedbackEncode", name, 12 * fn + e,
           t.Ms(reps, [&] { return kc::ErrorFeedbackEncode(c, z, w, n, enc, flag, 0); }));
    const size_t eb = diloco::kernels::EncodedBytes(c, n);
    const float d2h =
        t.Ms(reps, [&] { return cudaMemcpyAsync(pinned, enc, eb, cudaMemcpyDeviceToHost); });
    const float h2d =
        t.Ms(reps, [&] { return cudaMemcpyAsync(enc, pinned, eb, cudaMemcpyHostToDevice); });
    std::printf("%-22s %-10s payload %.1f MiB: D2H %.3f ms (%.1f GB/s), H2D %.3f ms (%.1f GB/s)\n",
                "pinned payload copy", name.c_str(), eb / 1048576.0, d2h, eb / (d2h * 1e-3) / 1e9,
                h2d, eb / (h2d * 1e-3) / 1e9);
  }
  int bad = 0;
  CHECK_CUDA(cudaMemcpy(&bad, flag, sizeof(int), cudaMemcpyDeviceToHost));
  if (bad != 0) std::printf("WARNING: non-finite values were flagged during the run\n");

  CHECK_CUDA(cudaMemset(w, 0, n * 4));
  Report("NesterovStep", "fp32", 20 * fn, t.Ms(reps, [&] {
    return kc::NesterovStep({1e-3f, 0.9f}, y, w, z, n, 0);
  }));
  CHECK_CUDA(cudaMemset(w, 0, n * 4));
  float* v;
  CHECK_CUDA(cudaMalloc(&v, n * 4));
  CHECK_CUDA(cudaMemset(v, 0, n * 4));
  int64_t step = 0;
  Report("AdamWStep", "fp32", 28 * fn, t.Ms(reps, [&] {
    return kc::AdamWStep(diloco::kernels::AdamWParams{}, ++step, y, z, w, v, n, 0);
  }));
  Report("Delta", "fp32", 12 * fn, t.Ms(reps, [&] { return kc::Delta(x, y, z, n, 0); }));
  Report("LerpAdopt", "fp32", 12 * fn, t.Ms(reps, [&] { return kc::LerpAdopt(x, y, 0.5f, n, 0); }));
  cudaFree(v);
  cudaFree(x);
  cudaFree(y);
  cudaFree(z);
  cudaFree(w);
  cudaFree(enc);
  cudaFree(flag);
  cudaFreeHost(pinned);
  return 0;
}
