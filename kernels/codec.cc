// The fast CPU codecs: argument checks, the all-finite pre-pass, then blocks spread over the
// kernel thread pool through the best instruction-set table (fast_ops.h).
#include "kernels/codec.h"

#include <algorithm>
#include <atomic>

#include "kernels/codec_format.h"
#include "kernels/codec_table.h"
#include "kernels/fast_ops.h"
#include "kernels/quant_math.h"
#include "kernels/thread_pool.h"

namespace diloco::kernels {
namespace {

// About 256 KiB of fp32 per task: below that, threads cost more than they save.
constexpr size_t kMinElementsPerTask = 1 << 16;

size_t Units(Codec c, size_t n) { return (n + c.block - 1) / c.block; }
size_t MinUnits(Codec c) { return std::max<size_t>(1, kMinElementsPerTask / c.block); }

void AtomicMax(std::atomic<uint32_t>& a, uint32_t v) {
  uint32_t cur = a.load(std::memory_order_relaxed);
  while (cur < v && !a.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

bool AllFinite(const float* x, size_t n) {
  std::atomic<uint32_t> m{0};
  ParallelFor(n, kMinElementsPerTask, [&](size_t lo, size_t hi) {
    AtomicMax(m, internal::Ops().abs_max_bits(x + lo, hi - lo));
  });
  return m.load() < qm::kInfBits;
}

bool SumAllFinite(const float* a, const float* b, size_t n) {
  std::atomic<uint32_t> m{0};
  ParallelFor(n, kMinElementsPerTask, [&](size_t lo, size_t hi) {
    AtomicMax(m, internal::Ops().abs_max_sum_bits(a + lo, b + lo, hi - lo));
  });
  return m.load() < qm::kInfBits;
}

absl::Status DecodeImpl(Codec c, std::span<const uint8_t> in, float weight, bool accumulate,
                        std::span<float> out) {
  const size_t n = out.size();
  if (absl::Status st = internal::CheckSizes(c, n, in.size()); !st.ok()) return st;
  const CodecEntry& e = EntryOf(c);
  if (absl::Status st = e.decode_check(c, in, n); !st.ok()) return st;
  ParallelFor(Units(c, n), MinUnits(c), [&](size_t b0, size_t b1) {
    e.decode(c, in.data(), n, b0, b1, weight, accumulate, out.data());
  });
  return absl::OkStatus();
}

}  // namespace

absl::Status Encode(Codec c, std::span<const float> x, std::span<uint8_t> out) {
  const size_t n = x.size();
  if (absl::Status st = internal::CheckSizes(c, n, out.size()); !st.ok()) return st;
  if (!AllFinite(x.data(), n)) return internal::NonFiniteError("input");
  const CodecEntry& e = EntryOf(c);
  ParallelFor(Units(c, n), MinUnits(c),
              [&](size_t b0, size_t b1) { e.encode(c, x.data(), n, b0, b1, out.data()); });
  return absl::OkStatus();
}

absl::Status Decode(Codec c, std::span<const uint8_t> in, std::span<float> out) {
  return DecodeImpl(c, in, 1.0f, /*accumulate=*/false, out);
}

absl::Status DecodeAccumulate(Codec c, std::span<const uint8_t> in, float weight,
                              std::span<float> acc) {
  return DecodeImpl(c, in, weight, /*accumulate=*/true, acc);
}

absl::Status ErrorFeedbackEncode(Codec c, std::span<const float> delta, std::span<float> err,
                                 std::span<uint8_t> out) {
  const size_t n = delta.size();
  if (err.size() != n) return absl::InvalidArgumentError("err and delta differ in size");
  if (absl::Status st = internal::CheckSizes(c, n, out.size()); !st.ok()) return st;
  if (!SumAllFinite(err.data(), delta.data(), n)) return internal::NonFiniteError("err + delta");
  const CodecEntry& e = EntryOf(c);
  ParallelFor(Units(c, n), MinUnits(c), [&](size_t b0, size_t b1) {
    e.error_feedback(c, delta.data(), err.data(), n, b0, b1, out.data());
  });
  return absl::OkStatus();
}

namespace internal {

void DenseEncodeBlocks(Codec c, const float* x, size_t n, size_t b0, size_t b1, uint8_t* enc) {
  Ops().encode(c, x, n, b0, b1, enc);
}

void DenseDecodeBlocks(Codec c, const uint8_t* enc, size_t n, size_t b0, size_t b1, float w,
                       bool acc, float* out) {
  Ops().decode(c, enc, n, b0, b1, w, acc, out);
}

void DenseErrorFeedbackBlocks(Codec c, const float* delta, float* err, size_t n, size_t b0,
                              size_t b1, uint8_t* enc) {
  Ops().error_feedback(c, delta, err, n, b0, b1, enc);
}

const FastOps& Ops() {
  static const FastOps& ops = [&]() -> const FastOps& {
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")) {
      return Avx512Ops();
    }
    if (__builtin_cpu_supports("avx2")) return Avx2Ops();
    return GenericOps();
  }();
  return ops;
}

}  // namespace internal
}  // namespace diloco::kernels
