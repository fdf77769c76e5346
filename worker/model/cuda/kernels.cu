#include <cfloat>

#include "worker/model/cuda/kernels.cuh"

namespace diloco::model::cuda {
namespace {

constexpr int kThreads = 256;

struct SumOp {
  static constexpr float kIdentity = 0.f;
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  static constexpr float kIdentity = -FLT_MAX;
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

// Reduction over a warp; every lane gets the result.
template <typename Op>
__device__ __forceinline__ float WarpReduce(float x) {
  for (int o = 16; o > 0; o >>= 1) x = Op()(x, __shfl_xor_sync(0xffffffffu, x, o));
  return x;
}
__device__ __forceinline__ float WarpSum(float x) { return WarpReduce<SumOp>(x); }
__device__ __forceinline__ float WarpMax(float x) { return WarpReduce<MaxOp>(x); }

// Reduction over a block of kThreads; every thread gets the result.
template <typename Op>
__device__ float BlockReduce(float x) {
  __shared__ float part[kThreads / 32];
  __shared__ float total;
  x = WarpReduce<Op>(x);
  if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = x;
  __syncthreads();
  if (threadIdx.x < 32) {
    float y = threadIdx.x < kThreads / 32 ? part[threadIdx.x] : Op::kIdentity;
    y = WarpReduce<Op>(y);
    if (threadIdx.x == 0) total = y;
  }
  __syncthreads();
  const float r = total;
  __syncthreads();
  return r;
}
__device__ float BlockSum(float x) { return BlockReduce<SumOp>(x); }
__device__ float BlockMax(float x) { return BlockReduce<MaxOp>(x); }

// Blocks of kThreads covering n elements; at least one, since a launch of 0 blocks fails with
// cudaErrorInvalidConfiguration (every kernel here returns for indexes >= n, so an empty size
// launches one block that does nothing).
int Blocks(int64_t n) { return n <= 0 ? 1 : static_cast<int>((n + kThreads - 1) / kThreads); }

__global__ void EncoderForwardK(float* out, const int32_t* inp, const float* wte, const float* wpe,
                                int T, int C, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int64_t row = i / C;
  const int c = i % C, t = row % T;
  out[i] = wte[int64_t(inp[row]) * C + c] + wpe[int64_t(t) * C + c];
}

__global__ void EncoderBackwardK(float* dwte, float* dwpe, const float* dout, const int32_t* inp,
                                 int T, int C, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int64_t row = i / C;
  const int c = i % C, t = row % T;
  atomicAdd(&dwte[int64_t(inp[row]) * C + c], dout[i]);
  atomicAdd(&dwpe[int64_t(t) * C + c], dout[i]);
}

// One warp per row.
__global__ void LayerNormForwardK(float* out, float* mean, float* rstd, const float* inp,
                                  const float* w, const float* b, int N, int C) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= N) return;
  const float* x = inp + int64_t(row) * C;
  float s = 0;
  for (int c = lane; c < C; c += 32) s += x[c];
  const float m = WarpSum(s) / C;
  float v = 0;
  for (int c = lane; c < C; c += 32) v += (x[c] - m) * (x[c] - m);
  const float r = rsqrtf(WarpSum(v) / C + 1e-5f);
  float* y = out + int64_t(row) * C;
  for (int c = lane; c < C; c += 32) y[c] = (x[c] - m) * r * w[c] + b[c];
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// Warps loop over rows; dw/db gather in shared memory, one atomicAdd per block and channel.
__global__ void LayerNormBackwardK(float* dinp, float* dw, float* db, const float* dout,
                                   const float* inp, const float* w, const float* mean,
                                   const float* rstd, int N, int C) {
  extern __shared__ float smem[];
  float* sdw = smem;
  float* sdb = smem + C;
  for (int c = threadIdx.x; c < 2 * C; c += blockDim.x) smem[c] = 0;
  __syncthreads();
  const int warps = blockDim.x / 32, lane = threadIdx.x & 31;
  for (int row = blockIdx.x * warps + threadIdx.x / 32; row < N; row += gridDim.x * warps) {
    const float* dy = dout + int64_t(row) * C;
    const float* x = inp + int64_t(row) * C;
    float* dx = dinp + int64_t(row) * C;
    const float m = mean[row], r = rstd[row];
    float a = 0, bsum = 0;
    for (int c = lane; c < C; c += 32) {
      const float xhat = (x[c] - m) * r, dn = dy[c] * w[c];
      a += dn;
      bsum += dn * xhat;
    }
    a = WarpSum(a) / C;
    bsum = WarpSum(bsum) / C;
    for (int c = lane; c < C; c += 32) {
      const float xhat = (x[c] - m) * r, dn = dy[c] * w[c];
      atomicAdd(&sdb[c], dy[c]);
      atomicAdd(&sdw[c], xhat * dy[c]);
      dx[c] += r * (dn - a - xhat * bsum);
    }
  }
  __syncthreads();
  for (int c = threadIdx.x; c < C; c += blockDim.x) {
    atomicAdd(&dw[c], sdw[c]);
    atomicAdd(&db[c], sdb[c]);
  }
}

__global__ void BroadcastRowsK(float* out, const float* bias, int OC, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = bias[i % OC];
}

// blockIdx.y picks a chunk of rows; one atomicAdd per column and chunk.
__global__ void BiasBackwardK(float* dbias, const float* dout, int N, int OC, int rows_per) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= OC) return;
  const int r0 = blockIdx.y * rows_per, r1 = min(N, r0 + rows_per);
  float s = 0;
  for (int r = r0; r < r1; ++r) s += dout[int64_t(r) * OC + col];
  atomicAdd(&dbias[col], s);
}

// Element i of (B,NH,T,hs) <-> qkv (B,T,3C).
__global__ void SplitHeadsK(float* q, float* k, float* v, const float* qkv, int T, int C, int NH,
                            int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int hs = C / NH;
  const int d = i % hs;
  const int t = (i / hs) % T;
  const int h = (i / (int64_t(hs) * T)) % NH;
  const int64_t b = i / (int64_t(hs) * T * NH);
  const int64_t src = (b * T + t) * 3 * C + h * hs + d;
  q[i] = qkv[src];
  k[i] = qkv[src + C];
  v[i] = qkv[src + 2 * C];
}

__global__ void MergeQkvGradsK(float* dqkv, const float* dq, const float* dk, const float* dv,
                               int T, int C, int NH, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const int hs = C / NH;
  const int d = i % hs;
  const int t = (i / hs) % T;
  const int h = (i / (int64_t(hs) * T)) % NH;
  const int64_t b = i / (int64_t(hs) * T * NH);
  const int64_t dst = (b * T + t) * 3 * C + h * hs + d;
  dqkv[dst] = dq[i];
  dqkv[dst + C] = dk[i];
  dqkv[dst + 2 * C] = dv[i];
}

__global__ void MergeHeadsK(float* out, const float* y, int T, int C, int NH, int64_t n,
                            bool reverse) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;  // index into (B,NH,T,hs)
  if (i >= n) return;
  const int hs = C / NH;
  const int d = i % hs;
  const int t = (i / hs) % T;
  const int h = (i / (int64_t(hs) * T)) % NH;
  const int64_t b = i / (int64_t(hs) * T * NH);
  const int64_t o = (b * T + t) * C + h * hs + d;
  if (reverse)
    out[i] = y[o];  // out is dy (B,NH,T,hs), y is dout (B,T,C)
  else
    out[o] = y[i];
}

// One warp per row (b, h, i): softmax over j <= i.
__global__ void CausalSoftmaxForwardK(float* att, int rows, int T) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const int i = row % T;
  float* a = att + int64_t(row) * T;
  float mx = -FLT_MAX;
  for (int j = lane; j <= i; j += 32) mx = fmaxf(mx, a[j]);
  mx = WarpMax(mx);
  float s = 0;
  for (int j = lane; j <= i; j += 32) {
    const float e = __expf(a[j] - mx);
    a[j] = e;
    s += e;
  }
  const float inv = 1.f / WarpSum(s);
  for (int j = lane; j < T; j += 32) a[j] = j <= i ? a[j] * inv : 0.f;
}

__global__ void CausalSoftmaxBackwardK(float* datt, const float* att, int rows, int T) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x & 31;
  if (row >= rows) return;
  const int i = row % T;
  float* d = datt + int64_t(row) * T;
  const float* a = att + int64_t(row) * T;
  float dot = 0;
  for (int j = lane; j <= i; j += 32) dot += a[j] * d[j];
  dot = WarpSum(dot);
  for (int j = lane; j < T; j += 32) d[j] = j <= i ? a[j] * (d[j] - dot) : 0.f;
}

__global__ void GeluForwardK(float* out, const float* inp, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float x = inp[i];
  out[i] = 0.5f * x * (1.f + tanhf(0.7978845608f * (x + 0.044715f * x * x * x)));
}

__global__ void GeluBackwardK(float* dinp, const float* inp, const float* dout, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float x = inp[i];
  const float k = 0.7978845608f;
  const float th = tanhf(k * (x + 0.044715f * x * x * x));
  const float g =
      0.5f * (1.f + th) + 0.5f * x * (1.f - th * th) * k * (1.f + 3.f * 0.044715f * x * x);
  dinp[i] += g * dout[i];
}

__global__ void ResidualForwardK(float* out, const float* a, const float* b, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

__global__ void ResidualBackwardK(float* da, float* db, const float* dout, int64_t n) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  da[i] += dout[i];
  db[i] += dout[i];
}

// One block per row.
__global__ void CrossEntropyForwardK(float* probs, float* losses, float* loss_sum,
                                     const float* logits, const int32_t* targets, int V,
                                     float loss_scale) {
  const int64_t row = blockIdx.x;
  const float* l = logits + row * V;
  float* p = probs + row * V;
  float mx = -FLT_MAX;
  for (int j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, l[j]);
  mx = BlockMax(mx);
  float s = 0;
  for (int j = threadIdx.x; j < V; j += blockDim.x) s += __expf(l[j] - mx);
  s = BlockSum(s);
  const float inv = 1.f / s;
  for (int j = threadIdx.x; j < V; j += blockDim.x) p[j] = __expf(l[j] - mx) * inv;
  if (threadIdx.x == 0) {
    const float loss = logf(s) - (l[targets[row]] - mx);
    losses[row] = loss;
    atomicAdd(loss_sum, loss * loss_scale);
  }
}

__global__ void CrossEntropyBackwardK(float* dlogits, const float* probs, const int32_t* targets,
                                      int V, float scale) {
  const int64_t row = blockIdx.x;
  const float* p = probs + row * V;
  float* d = dlogits + row * V;
  const int tgt = targets[row];
  for (int j = threadIdx.x; j < V; j += blockDim.x) d[j] += (p[j] - (j == tgt ? 1.f : 0.f)) * scale;
}

__global__ void SumSquaresK(float* out, const float* x, int64_t n) {
  float s = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    s += x[i] * x[i];
  s = BlockSum(s);
  if (threadIdx.x == 0) atomicAdd(out, s);
}

__global__ void AdamWK(float* param, const float* grad, float* m, float* v, int64_t n, float lr,
                       float beta1, float beta2, float eps, float wd, float bc1, float bc2,
                       float grad_scale, float clip, const float* sumsq) {
  const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  float scale = grad_scale;
  if (clip > 0.f) {
    const float norm = sqrtf(*sumsq) * grad_scale;
    if (norm > clip) scale *= clip / norm;
  }
  const float g = grad[i] * scale;
  const float mi = beta1 * m[i] + (1.f - beta1) * g;
  const float vi = beta2 * v[i] + (1.f - beta2) * g * g;
  m[i] = mi;
  v[i] = vi;
  param[i] -= lr * ((mi / bc1) / (sqrtf(vi / bc2) + eps) + wd * param[i]);
}

}  // namespace

void EncoderForward(float* out, const int32_t* inp, const float* wte, const float* wpe, int B,
                    int T, int C, cudaStream_t s) {
  const int64_t n = int64_t(B) * T * C;
  EncoderForwardK<<<Blocks(n), kThreads, 0, s>>>(out, inp, wte, wpe, T, C, n);
}
void EncoderBackward(float* dwte, float* dwpe, const float* dout, const int32_t* inp, int B, int T,
                     int C, cudaStream_t s) {
  const int64_t n = int64_t(B) * T * C;
  EncoderBackwardK<<<Blocks(n), kThreads, 0, s>>>(dwte, dwpe, dout, inp, T, C, n);
}
void LayerNormForward(float* out, float* mean, float* rstd, const float* inp, const float* w,
                      const float* b, int N, int C, cudaStream_t s) {
  LayerNormForwardK<<<(N + 7) / 8, kThreads, 0, s>>>(out, mean, rstd, inp, w, b, N, C);
}
void LayerNormBackward(float* dinp, float* dw, float* db, const float* dout, const float* inp,
                       const float* w, const float* mean, const float* rstd, int N, int C,
                       cudaStream_t s) {
  const int blocks = min(512, (N + 7) / 8);
  LayerNormBackwardK<<<blocks, kThreads, 2 * C * sizeof(float), s>>>(dinp, dw, db, dout, inp, w,
                                                                     mean, rstd, N, C);
}
void BroadcastRows(float* out, const float* bias, int N, int OC, cudaStream_t s) {
  const int64_t n = int64_t(N) * OC;
  BroadcastRowsK<<<Blocks(n), kThreads, 0, s>>>(out, bias, OC, n);
}
void BiasBackward(float* dbias, const float* dout, int N, int OC, cudaStream_t s) {
  const int chunks = min(64, N);
  const int rows_per = (N + chunks - 1) / chunks;
  dim3 grid((OC + kThreads - 1) / kThreads, chunks);
  BiasBackwardK<<<grid, kThreads, 0, s>>>(dbias, dout, N, OC, rows_per);
}
void SplitHeads(float* q, float* k, float* v, const float* qkv, int B, int T, int C, int NH,
                cudaStream_t s) {
  const int64_t n = int64_t(B) * T * C;
  SplitHeadsK<<<Blocks(n), kThreads, 0, s>>>(q, k, v, qkv, T, C, NH, n);
}
void MergeQkvGrads(float* dqkv, const float* dq, const float* dk, const float* dv, int B, int T,
                   int C, int NH, cudaStream_t s) {
  const int64_t n = int64_t(B) * T * C;
  MergeQkvGradsK<<<Blocks(n), kThreads, 0, s>>>(dqkv, dq, dk, dv, T, C, NH, n);
}
void MergeHeads(float* out, const float* y, int B, int T, int C, int NH, cudaStream_t s) {
  const int64_t n = int64_t(B) * T * C;
  MergeHeadsK<<<Blocks(n), kThreads, 0, s>>>(out, y, T, C, NH, n, false);
}
void SplitHeadsGrad(float* dy, const float* dout, int B, int T, int C, int NH, cudaStream_t s) {
  const int64_t n = int64_t(B) * T * C;
  MergeHeadsK<<<Blocks(n), kThreads, 0, s>>>(dy, dout, T, C, NH, n, true);
}
void CausalSoftmaxForward(float* att, int BNH, int T, cudaStream_t s) {
  const int rows = BNH * T;
  CausalSoftmaxForwardK<<<(rows + 7) / 8, kThreads, 0, s>>>(att, rows, T);
}
void CausalSoftmaxBackward(float* datt, const float* att, int BNH, int T, cudaStream_t s) {
  const int rows = BNH * T;
  CausalSoftmaxBackwardK<<<(rows + 7) / 8, kThreads, 0, s>>>(datt, att, rows, T);
}
void GeluForward(float* out, const float* inp, int64_t n, cudaStream_t s) {
  GeluForwardK<<<Blocks(n), kThreads, 0, s>>>(out, inp, n);
}
void GeluBackward(float* dinp, const float* inp, const float* dout, int64_t n, cudaStream_t s) {
  GeluBackwardK<<<Blocks(n), kThreads, 0, s>>>(dinp, inp, dout, n);
}
void ResidualForward(float* out, const float* a, const float* b, int64_t n, cudaStream_t s) {
  ResidualForwardK<<<Blocks(n), kThreads, 0, s>>>(out, a, b, n);
}
void ResidualBackward(float* da, float* db, const float* dout, int64_t n, cudaStream_t s) {
  ResidualBackwardK<<<Blocks(n), kThreads, 0, s>>>(da, db, dout, n);
}
void CrossEntropyForward(float* probs, float* losses, float* loss_sum, const float* logits,
                         const int32_t* targets, int N, int V, float loss_scale, cudaStream_t s) {
  CrossEntropyForwardK<<<N, kThreads, 0, s>>>(probs, losses, loss_sum, logits, targets, V,
                                              loss_scale);
}
void CrossEntropyBackward(float* dlogits, const float* probs, const int32_t* targets, int N, int V,
                          float scale, cudaStream_t s) {
  CrossEntropyBackwardK<<<N, kThreads, 0, s>>>(dlogits, probs, targets, V, scale);
}
void SumSquares(float* out, const float* x, int64_t n, cudaStream_t s) {
  const int64_t want = (n + kThreads - 1) / kThreads;
  const int blocks = static_cast<int>(want < 1024 ? want : 1024);
  SumSquaresK<<<blocks, kThreads, 0, s>>>(out, x, n);
}
void AdamW(float* param, const float* grad, float* m, float* v, int64_t n, float lr, float beta1,
           float beta2, float eps, float weight_decay, float bc1, float bc2, float grad_scale,
           float clip, const float* sumsq, cudaStream_t s) {
  AdamWK<<<Blocks(n), kThreads, 0, s>>>(param, grad, m, v, n, lr, beta1, beta2, eps, weight_decay,
                                        bc1, bc2, grad_scale, clip, sumsq);
}

}  // namespace diloco::model::cuda
