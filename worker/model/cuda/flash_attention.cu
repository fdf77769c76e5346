#include <cmath>

#include "worker/model/cuda/flash_attention.cuh"

namespace diloco::model::cuda {
namespace {

// Rows a block owns (one thread each) and the rows of the other side streamed per tile, by the
// head size the kernel is compiled for (HS, a bound: the real hs <= HS, the rest padded with
// zeros). The shared tiles stay under the 48 KiB of static shared memory.
template <int HS>
struct Tiles {
  static constexpr int kRows = HS <= 64 ? 64 : 32;   // threads of a block, rows it owns
  static constexpr int kStream = HS <= 64 ? 16 : 8;  // streamed rows per tile in the backward
  static constexpr int kPad = HS + 1;                // a thread-owned shared row: no bank conflict
};

// Rows k0 .. k0 + R - 1 of k and v (of one head, at `base`) into shared tiles whose rows are
// STRIDE floats apart; rows past T and columns past hs are zeros. Every thread of the block
// (R of them) takes part.
template <int HS, int R, int STRIDE>
__device__ void LoadKv(float (*ks)[STRIDE], float (*vs)[STRIDE], const float* __restrict__ k,
                       const float* __restrict__ v, size_t base, int k0, int T, int hs) {
  for (int i = threadIdx.x; i < R * HS; i += R) {
    const int j = i / HS, d = i % HS, kr = k0 + j;
    const bool ok = kr < T && d < hs;
    ks[j][d] = ok ? k[base + size_t(kr) * hs + d] : 0.f;
    vs[j][d] = ok ? v[base + size_t(kr) * hs + d] : 0.f;
  }
}

// Forward: block (query tile, head); thread = one query row. Key and value tiles of kRows rows
// stream through shared memory; keys past the block's last row are never loaded (causal).
template <int HS>
__global__ void __launch_bounds__(Tiles<HS>::kRows)
    ForwardK(float* __restrict__ y, float* __restrict__ lse, const float* __restrict__ q,
             const float* __restrict__ k, const float* __restrict__ v, int T, int hs, float scale) {
  constexpr int R = Tiles<HS>::kRows;
  __shared__ float ks[R][HS], vs[R][HS];
  const size_t base = size_t(blockIdx.y) * T * hs;
  const int row = blockIdx.x * R + threadIdx.x;
  const bool live = row < T;
  float qr[HS], acc[HS];
#pragma unroll
  for (int d = 0; d < HS; ++d) {
    qr[d] = live && d < hs ? q[base + size_t(row) * hs + d] * scale : 0.f;
    acc[d] = 0.f;
  }
  float m = -INFINITY, l = 0.f;
  const int last = min(T, int(blockIdx.x + 1) * R) - 1;
  for (int k0 = 0; k0 <= last; k0 += R) {
    __syncthreads();  // the previous tile is read by every thread
    LoadKv<HS, R, HS>(ks, vs, k, v, base, k0, T, hs);
    __syncthreads();
    const int n = live ? min(R, row - k0 + 1) : 0;  // keys k0 .. row
    for (int j = 0; j < n; ++j) {
      float sc = 0.f;
#pragma unroll
      for (int d = 0; d < HS; ++d) sc += qr[d] * ks[j][d];
      if (sc > m) {  // a new maximum: rescale what was summed under the old one
        const float c = expf(m - sc);
        l *= c;
#pragma unroll
        for (int d = 0; d < HS; ++d) acc[d] *= c;
        m = sc;
      }
      const float p = expf(sc - m);
      l += p;
#pragma unroll
      for (int d = 0; d < HS; ++d) acc[d] += p * vs[j][d];
    }
  }
  if (!live) return;
  const float inv = 1.f / l;
#pragma unroll
  for (int d = 0; d < HS; ++d)
    if (d < hs) y[base + size_t(row) * hs + d] = acc[d] * inv;
  lse[size_t(blockIdx.y) * T + row] = m + logf(l);
}

// dsum[row] = dy[row] . y[row], one thread per row of (BNH x T).
__global__ void RowDotK(float* __restrict__ dsum, const float* __restrict__ dy,
                        const float* __restrict__ y, long rows, int hs) {
  const long r = long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float sum = 0.f;
  for (int d = 0; d < hs; ++d) sum += dy[r * hs + d] * y[r * hs + d];
  dsum[r] = sum;
}

// dk, dv: block (key tile, head); thread = one key row j, whose k and v rows sit in shared
// memory (padded rows: each thread reads its own). Query rows i >= j stream through in tiles of
// kStream with their dy, lse and dsum. p = exp(scale q.k - lse_i); dv_j += p dy_i;
// ds = p (dy_i . v_j - dsum_i); dk_j += ds scale q_i.
template <int HS>
__global__ void __launch_bounds__(Tiles<HS>::kRows)
    BackwardKvK(float* __restrict__ dk, float* __restrict__ dv, const float* __restrict__ q,
                const float* __restrict__ k, const float* __restrict__ v,
                const float* __restrict__ lse, const float* __restrict__ dsum,
                const float* __restrict__ dy, int T, int hs, float scale) {
  constexpr int R = Tiles<HS>::kRows, S = Tiles<HS>::kStream, P = Tiles<HS>::kPad;
  __shared__ float ks[R][P], vs[R][P];
  __shared__ float qs[S][HS], dys[S][HS], ls[S], ds[S];
  const size_t base = size_t(blockIdx.y) * T * hs;
  const size_t rbase = size_t(blockIdx.y) * T;
  const int k0 = blockIdx.x * R, row = k0 + threadIdx.x;
  const bool live = row < T;
  LoadKv<HS, R, P>(ks, vs, k, v, base, k0, T, hs);
  float dka[HS], dva[HS];
#pragma unroll
  for (int d = 0; d < HS; ++d) dka[d] = dva[d] = 0.f;
  for (int i0 = k0; i0 < T; i0 += S) {
    __syncthreads();  // ks/vs written, or the previous query tile read by every thread
    for (int i = threadIdx.x; i < S * HS; i += R) {
      const int a = i / HS, d = i % HS, qr = i0 + a;
      const bool ok = qr < T && d < hs;
      qs[a][d] = ok ? q[base + size_t(qr) * hs + d] : 0.f;
      dys[a][d] = ok ? dy[base + size_t(qr) * hs + d] : 0.f;
    }
    for (int a = threadIdx.x; a < S; a += R) {
      const bool ok = i0 + a < T;
      ls[a] = ok ? lse[rbase + i0 + a] : 0.f;
      ds[a] = ok ? dsum[rbase + i0 + a] : 0.f;
    }
    __syncthreads();
    if (!live) continue;
    const int first = max(0, row - i0);  // queries i >= row only (causal)
    const int end = min(S, T - i0);
    for (int a = first; a < end; ++a) {
      float sc = 0.f, dp = 0.f;
#pragma unroll
      for (int d = 0; d < HS; ++d) {
        sc += qs[a][d] * ks[threadIdx.x][d];
        dp += dys[a][d] * vs[threadIdx.x][d];
      }
      const float p = expf(sc * scale - ls[a]);
      const float g = p * (dp - ds[a]) * scale;
#pragma unroll
      for (int d = 0; d < HS; ++d) {
        dva[d] += p * dys[a][d];
        dka[d] += g * qs[a][d];
      }
    }
  }
  if (!live) return;
#pragma unroll
  for (int d = 0; d < HS; ++d) {
    if (d < hs) {
      dk[base + size_t(row) * hs + d] = dka[d];
      dv[base + size_t(row) * hs + d] = dva[d];
    }
  }
}

// dq: block (query tile, head); thread = one query row i, its q and dy rows in registers; key
// and value rows j <= i stream through shared memory. dq_i += ds scale k_j.
template <int HS>
__global__ void __launch_bounds__(Tiles<HS>::kRows)
    BackwardQK(float* __restrict__ dq, const float* __restrict__ q, const float* __restrict__ k,
               const float* __restrict__ v, const float* __restrict__ lse,
               const float* __restrict__ dsum, const float* __restrict__ dy, int T, int hs,
               float scale) {
  constexpr int R = Tiles<HS>::kRows;
  __shared__ float ks[R][HS], vs[R][HS];
  const size_t base = size_t(blockIdx.y) * T * hs;
  const int row = blockIdx.x * R + threadIdx.x;
  const bool live = row < T;
  float qr[HS], dyr[HS], dqa[HS];
#pragma unroll
  for (int d = 0; d < HS; ++d) {
    const bool ok = live && d < hs;
    qr[d] = ok ? q[base + size_t(row) * hs + d] : 0.f;
    dyr[d] = ok ? dy[base + size_t(row) * hs + d] : 0.f;
    dqa[d] = 0.f;
  }
  const float l = live ? lse[size_t(blockIdx.y) * T + row] : 0.f;
  const float dd = live ? dsum[size_t(blockIdx.y) * T + row] : 0.f;
  const int last = min(T, int(blockIdx.x + 1) * R) - 1;
  for (int k0 = 0; k0 <= last; k0 += R) {
    __syncthreads();
    LoadKv<HS, R, HS>(ks, vs, k, v, base, k0, T, hs);
    __syncthreads();
    const int n = live ? min(R, row - k0 + 1) : 0;
    for (int j = 0; j < n; ++j) {
      float sc = 0.f, dp = 0.f;
#pragma unroll
      for (int d = 0; d < HS; ++d) {
        sc += qr[d] * ks[j][d];
        dp += dyr[d] * vs[j][d];
      }
      const float p = expf(sc * scale - l);
      const float g = p * (dp - dd) * scale;
#pragma unroll
      for (int d = 0; d < HS; ++d) dqa[d] += g * ks[j][d];
    }
  }
  if (!live) return;
#pragma unroll
  for (int d = 0; d < HS; ++d)
    if (d < hs) dq[base + size_t(row) * hs + d] = dqa[d];
}

template <int HS>
void Forward(float* y, float* lse, const float* q, const float* k, const float* v, int BNH, int T,
             int hs, float scale, cudaStream_t s) {
  constexpr int R = Tiles<HS>::kRows;
  const dim3 grid((T + R - 1) / R, BNH);
  ForwardK<HS><<<grid, R, 0, s>>>(y, lse, q, k, v, T, hs, scale);
}

template <int HS>
void Backward(float* dq, float* dk, float* dv, const float* q, const float* k, const float* v,
              const float* lse, const float* dsum, const float* dy, int BNH, int T, int hs,
              float scale, cudaStream_t s) {
  constexpr int R = Tiles<HS>::kRows;
  const dim3 grid((T + R - 1) / R, BNH);
  BackwardKvK<HS><<<grid, R, 0, s>>>(dk, dv, q, k, v, lse, dsum, dy, T, hs, scale);
  BackwardQK<HS><<<grid, R, 0, s>>>(dq, q, k, v, lse, dsum, dy, T, hs, scale);
}

}  // namespace

bool FlashAttentionSupports(int hs) { return hs >= 1 && hs <= 128; }

void FlashAttentionForward(float* y, float* lse, const float* q, const float* k, const float* v,
                           int BNH, int T, int hs, float scale, cudaStream_t s) {
  if (BNH <= 0 || T <= 0) return;
  if (hs <= 32) {
    Forward<32>(y, lse, q, k, v, BNH, T, hs, scale, s);
  } else if (hs <= 64) {
    Forward<64>(y, lse, q, k, v, BNH, T, hs, scale, s);
  } else {
    Forward<128>(y, lse, q, k, v, BNH, T, hs, scale, s);
  }
}

void FlashAttentionBackward(float* dq, float* dk, float* dv, float* dsum, const float* q,
                            const float* k, const float* v, const float* y, const float* lse,
                            const float* dy, int BNH, int T, int hs, float scale, cudaStream_t s) {
  if (BNH <= 0 || T <= 0) return;
  const long rows = long(BNH) * T;
  RowDotK<<<unsigned((rows + 255) / 256), 256, 0, s>>>(dsum, dy, y, rows, hs);
  if (hs <= 32) {
    Backward<32>(dq, dk, dv, q, k, v, lse, dsum, dy, BNH, T, hs, scale, s);
  } else if (hs <= 64) {
    Backward<64>(dq, dk, dv, q, k, v, lse, dsum, dy, BNH, T, hs, scale, s);
  } else {
    Backward<128>(dq, dk, dv, q, k, v, lse, dsum, dy, BNH, T, hs, scale, s);
  }
}

}  // namespace diloco::model::cuda
