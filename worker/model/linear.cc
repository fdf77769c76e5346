// Matrix products through OpenBLAS (sgemm / dgemm) and the Linear layer built on them.
// Large float products are split over the CPU trainer's threads (cpu_threads.h).
#include <cblas.h>

#include <algorithm>
#include <cstdint>

#include "worker/model/cpu_threads.h"
#include "worker/model/layers.h"

namespace diloco::model {

// A product below this many FLOPs is not split: waking the threads and waiting for them costs
// tens of microseconds (on the tiny GPT, splitting its 4-17 MFLOP products made a 2-thread step
// 10% slower than not splitting them; benchmarks/model/RESULTS.md, "The CPU trainer's threads").
constexpr double kSplitFlops = 2e7;

// With CpuThreads() > 1 a large product is split into blocks of C's rows (or columns, when C
// has more of them), PartsFor(its FLOPs) of them, each one single-threaded sgemm on the pool
// (cpu_threads.h).
template <>
void Gemm<float>(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc) {
  const auto op_a = ta ? CblasTrans : CblasNoTrans, op_b = tb ? CblasTrans : CblasNoTrans;
  const double flops = 2.0 * M * N * K;
  const int parts = std::min(PartsFor(flops), std::max(M, N));
  if (parts == 1 || flops < kSplitFlops) {
    cblas_sgemm(CblasRowMajor, op_a, op_b, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  if (M >= N) {  // rows i0.. of C: rows of op(A) (columns of A when transposed)
    const int rows = (M + parts - 1) / parts;
    ParallelFor(parts, [&](int p) {
      const int i0 = p * rows, m = std::min(M, i0 + rows) - i0;
      if (m <= 0) return;
      const float* a = ta ? A + i0 : A + int64_t(i0) * lda;
      cblas_sgemm(CblasRowMajor, op_a, op_b, m, N, K, alpha, a, lda, B, ldb, beta,
                  C + int64_t(i0) * ldc, ldc);
    });
  } else {  // columns j0.. of C: columns of op(B) (rows of B when transposed)
    const int cols = (N + parts - 1) / parts;
    ParallelFor(parts, [&](int p) {
      const int j0 = p * cols, n = std::min(N, j0 + cols) - j0;
      if (n <= 0) return;
      const float* b = tb ? B + int64_t(j0) * ldb : B + j0;
      cblas_sgemm(CblasRowMajor, op_a, op_b, M, n, K, alpha, A, lda, b, ldb, beta, C + j0, ldc);
    });
  }
}

template <>
void Gemm<double>(bool ta, bool tb, int M, int N, int K, double alpha, const double* A, int lda,
                  const double* B, int ldb, double beta, double* C, int ldc) {
  cblas_dgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
}

template <typename F>
void LinearForward(F* out, const F* inp, const F* w, const F* bias, int N, int C, int OC) {
  if (bias != nullptr) {
    for (int i = 0; i < N; ++i)
      for (int o = 0; o < OC; ++o) out[int64_t(i) * OC + o] = bias[o];
  }
  Gemm<F>(false, true, N, OC, C, F(1), inp, C, w, C, bias != nullptr ? F(1) : F(0), out, OC);
}

template <typename F>
void LinearBackward(F* dinp, F* dw, F* dbias, const F* dout, const F* inp, const F* w, int N, int C,
                    int OC, bool dinp_overwrite) {
  const F beta = dinp_overwrite ? F(0) : F(1);
  Gemm<F>(false, false, N, C, OC, F(1), dout, OC, w, C, beta, dinp, C);  // dinp (+)= dout w
  Gemm<F>(true, false, OC, C, N, F(1), dout, OC, inp, C, F(1), dw, C);   // dw += dout^T inp
  if (dbias != nullptr) {
    for (int i = 0; i < N; ++i) {
      const F* row = dout + int64_t(i) * OC;
      for (int o = 0; o < OC; ++o) dbias[o] += row[o];
    }
  }
}

template void LinearForward<float>(float*, const float*, const float*, const float*, int, int, int);
template void LinearForward<double>(double*, const double*, const double*, const double*, int, int,
                                    int);
template void LinearBackward<float>(float*, float*, float*, const float*, const float*,
                                    const float*, int, int, int, bool);
template void LinearBackward<double>(double*, double*, double*, const double*, const double*,
                                     const double*, int, int, int, bool);

}  // namespace diloco::model
