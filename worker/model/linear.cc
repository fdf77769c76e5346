// Matrix products through OpenBLAS (sgemm / dgemm) and the Linear layer built on them.
#include <cblas.h>

#include "worker/model/layers.h"

namespace diloco::model {

template <>
void Gemm<float>(bool ta, bool tb, int M, int N, int K, float alpha, const float* A, int lda,
                 const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, M, N,
              K, alpha, A, lda, B, ldb, beta, C, ldc);
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
