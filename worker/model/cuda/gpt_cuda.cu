#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "worker/model/cuda/cublas_loader.h"
#include "worker/model/cuda/flash_attention.cuh"
#include "worker/model/cuda/gpt_cuda.h"
#ifdef DILOCO_HAVE_NCCL
#include "worker/model/cuda/nccl_loader.h"
#endif
#include "worker/model/cuda/kernels.cuh"
#include "worker/model/cuda/nccl_ranks.h"

namespace diloco::model::cuda {
namespace {

#define CUDA_TRY(expr)                                                              \
  do {                                                                              \
    cudaError_t e_ = (expr);                                                        \
    if (e_ != cudaSuccess) return std::string(#expr ": ") + cudaGetErrorString(e_); \
  } while (0)
#define CUBLAS_TRY(expr)                                                                   \
  do {                                                                                     \
    cublasStatus_t e_ = (expr);                                                            \
    if (e_ != CUBLAS_STATUS_SUCCESS)                                                       \
      return std::string(#expr ": cuBLAS status ") + std::to_string(static_cast<int>(e_)); \
  } while (0)
#define TRY(expr)               \
  do {                          \
    std::string e_ = (expr);    \
    if (!e_.empty()) return e_; \
  } while (0)

struct LayerActs {
  float *ln1, *ln1_mean, *ln1_rstd, *qkv, *q, *k, *v, *atty, *attproj, *res2;
  float* att = nullptr;  // materialized attention: the softmax, B x NH x T x T
  float* lse = nullptr;  // streaming attention: each row's log-sum-exp, B x NH x T
  float *ln2, *ln2_mean, *ln2_rstd, *fch, *fch_gelu, *fcproj, *res3;
};
struct LayerGrads {
  float *ln1, *qkv, *atty, *attproj, *res2, *ln2, *fch, *fch_gelu, *fcproj, *res3;
};

}  // namespace

struct Replica {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  std::vector<void*> allocations;
  float *params, *grads, *m, *v;
  float *encoded, *lnf, *lnf_mean, *lnf_rstd, *logits, *probs, *losses;
  std::vector<LayerActs> acts;
  // Activation gradients live in one block so a single memset zeroes them.
  float* dblock;
  size_t dblock_floats = 0;
  float *dencoded, *dlnf, *dlogits;
  std::vector<LayerGrads> dacts;
  float *y, *dy, *dq, *dk, *dv;  // attention scratch
  float* datt = nullptr;         // materialized: B x NH x T x T
  float* dsum = nullptr;         // streaming: B x NH x T
  int32_t *inputs, *targets;
  float* scalars;    // [0] loss sum, [1] gradient sum of squares
  float* host_loss;  // pinned
};

struct GptCuda::Impl {
  GpuShape shape;
  GpuLayout layout;
  const CublasApi* blas = nullptr;  // loaded by Init, before any handle exists
  std::vector<Replica> replicas;
  int base = 0;                // the first replica's device
  NcclRanks* ranks = nullptr;  // UseRanks's
#ifdef DILOCO_HAVE_NCCL
  const NcclApi* nccl = nullptr;  // loaded by Init when it trains on more than one GPU
  std::vector<ncclComm_t> comms;
#endif
  ~Impl();
  std::string Alloc(Replica& r, size_t floats, float** out);
  std::string Init(int gpus);
  std::string Gemm(Replica& r, bool ta, bool tb, int M, int N, int K, float alpha, const float* A,
                   int lda, const float* B, int ldb, float beta, float* C, int ldc);
  std::string GemmBatched(Replica& r, bool ta, bool tb, int M, int N, int K, float alpha,
                          const float* A, int lda, long long sa, const float* B, int ldb,
                          long long sb, float beta, float* C, int ldc, long long sc, int count);
  std::string Linear(Replica& r, float* out, const float* inp, const float* w, const float* bias,
                     int N, int C, int OC);
  std::string LinearBackward(Replica& r, float* dinp, float* dw, float* dbias, const float* dout,
                             const float* inp, const float* w, int N, int C, int OC);
  std::string Forward(Replica& r);
  std::string Backward(Replica& r);
  std::string Upload(Replica& r, const int32_t* inputs, const int32_t* targets);
  // Streaming attention where the head size allows (flash_attention.cuh).
  bool Streaming() const {
    return shape.attention == GpuAttention::kStreaming &&
           FlashAttentionSupports(shape.width / shape.heads);
  }
};

int DeviceCount(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    if (why != nullptr) *why = cudaGetErrorString(e);
    cudaGetLastError();  // clear the sticky error
    return 0;
  }
  return n;
}

GptCuda::Impl::~Impl() {
  // Every stream drains first: a communicator must not be destroyed under a collective in
  // flight on it.
  for (Replica& r : replicas) {
    cudaSetDevice(r.device);
    if (r.stream) cudaStreamSynchronize(r.stream);
  }
#ifdef DILOCO_HAVE_NCCL
  for (ncclComm_t c : comms) nccl->comm_destroy(c);
#endif
  for (Replica& r : replicas) {
    cudaSetDevice(r.device);
    for (void* p : r.allocations) cudaFree(p);
    if (r.host_loss) cudaFreeHost(r.host_loss);
    if (r.blas) blas->destroy(r.blas);
    if (r.stream) cudaStreamDestroy(r.stream);
  }
}

std::string GptCuda::Impl::Alloc(Replica& r, size_t floats, float** out) {
  void* p = nullptr;
  CUDA_TRY(cudaMalloc(&p, std::max<size_t>(floats, 1) * sizeof(float)));
  // On the work stream, which is non-blocking: a legacy-stream memset would not be ordered
  // before the work that first uses the buffer.
  CUDA_TRY(cudaMemsetAsync(p, 0, std::max<size_t>(floats, 1) * sizeof(float), r.stream));
  r.allocations.push_back(p);
  *out = static_cast<float*>(p);
  return "";
}

std::string GptCuda::Impl::Init(int gpus) {
  const GpuShape& s = shape;
  const size_t N = size_t(s.batch) * s.seq_len, C = s.width, V = s.vocab;
  const size_t att = size_t(s.batch) * s.heads * s.seq_len * s.seq_len;
  const size_t rows = size_t(s.batch) * s.heads * s.seq_len;
  if (shape.attention == GpuAttention::kAuto) {
    size_t least = SIZE_MAX;  // the fullest GPU's free memory decides for every replica
    for (int g = 0; g < gpus; ++g) {
      size_t free_bytes = 0, total = 0;
      CUDA_TRY(cudaSetDevice(base + g));
      CUDA_TRY(cudaMemGetInfo(&free_bytes, &total));
      least = std::min(least, free_bytes);
    }
    shape.attention = ChooseAttention(shape, least);
  }
  if (!Streaming() && shape.attention == GpuAttention::kStreaming)
    shape.attention = GpuAttention::kMaterialized;  // a head size the kernels do not take
  std::string load_error;
  blas = LoadCublas(&load_error);
  if (blas == nullptr) return load_error;
  replicas.resize(gpus);
  for (int g = 0; g < gpus; ++g) {
    Replica& r = replicas[g];
    r.device = base + g;
    CUDA_TRY(cudaSetDevice(r.device));
    CUDA_TRY(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking));
    CUBLAS_TRY(blas->create(&r.blas));
    CUBLAS_TRY(blas->set_stream(r.blas, r.stream));
    CUBLAS_TRY(blas->set_math_mode(r.blas, CUBLAS_TF32_TENSOR_OP_MATH));
    CUDA_TRY(cudaMallocHost(&r.host_loss, sizeof(float)));
    const size_t P = layout.total;
    TRY(Alloc(r, P, &r.params));
    TRY(Alloc(r, P, &r.grads));
    TRY(Alloc(r, P, &r.m));
    TRY(Alloc(r, P, &r.v));
    TRY(Alloc(r, N * C, &r.encoded));
    r.acts.resize(s.layers);
    for (LayerActs& a : r.acts) {
      TRY(Alloc(r, N * C, &a.ln1));
      TRY(Alloc(r, N, &a.ln1_mean));
      TRY(Alloc(r, N, &a.ln1_rstd));
      TRY(Alloc(r, N * 3 * C, &a.qkv));
      TRY(Alloc(r, N * C, &a.q));
      TRY(Alloc(r, N * C, &a.k));
      TRY(Alloc(r, N * C, &a.v));
      if (Streaming()) {
        TRY(Alloc(r, rows, &a.lse));
      } else {
        TRY(Alloc(r, att, &a.att));
      }
      TRY(Alloc(r, N * C, &a.atty));
      TRY(Alloc(r, N * C, &a.attproj));
      TRY(Alloc(r, N * C, &a.res2));
      TRY(Alloc(r, N * C, &a.ln2));
      TRY(Alloc(r, N, &a.ln2_mean));
      TRY(Alloc(r, N, &a.ln2_rstd));
      TRY(Alloc(r, N * 4 * C, &a.fch));
      TRY(Alloc(r, N * 4 * C, &a.fch_gelu));
      TRY(Alloc(r, N * C, &a.fcproj));
      TRY(Alloc(r, N * C, &a.res3));
    }
    TRY(Alloc(r, N * C, &r.lnf));
    TRY(Alloc(r, N, &r.lnf_mean));
    TRY(Alloc(r, N, &r.lnf_rstd));
    TRY(Alloc(r, N * V, &r.logits));
    TRY(Alloc(r, N * V, &r.probs));
    TRY(Alloc(r, N, &r.losses));
    // Gradient block: encoded, per layer (ln1, qkv3, atty, attproj, res2, ln2, fch4, fch_gelu4,
    // fcproj, res3 = 18 NC), lnf, logits.
    r.dblock_floats = N * C + size_t(s.layers) * 18 * N * C + N * C + N * V;
    TRY(Alloc(r, r.dblock_floats, &r.dblock));
    float* p = r.dblock;
    auto take = [&p](size_t n) {
      float* q = p;
      p += n;
      return q;
    };
    r.dencoded = take(N * C);
    r.dacts.resize(s.layers);
    for (LayerGrads& d : r.dacts) {
      d.ln1 = take(N * C);
      d.qkv = take(N * 3 * C);
      d.atty = take(N * C);
      d.attproj = take(N * C);
      d.res2 = take(N * C);
      d.ln2 = take(N * C);
      d.fch = take(N * 4 * C);
      d.fch_gelu = take(N * 4 * C);
      d.fcproj = take(N * C);
      d.res3 = take(N * C);
    }
    r.dlnf = take(N * C);
    r.dlogits = take(N * V);
    TRY(Alloc(r, N * C, &r.y));
    TRY(Alloc(r, N * C, &r.dy));
    if (Streaming()) {
      TRY(Alloc(r, rows, &r.dsum));
    } else {
      TRY(Alloc(r, att, &r.datt));
    }
    TRY(Alloc(r, N * C, &r.dq));
    TRY(Alloc(r, N * C, &r.dk));
    TRY(Alloc(r, N * C, &r.dv));
    float* tok = nullptr;
    TRY(Alloc(r, 2 * N, &tok));
    r.inputs = reinterpret_cast<int32_t*>(tok);
    r.targets = r.inputs + N;
    TRY(Alloc(r, 2, &r.scalars));
  }
  if (gpus > 1) {
#ifdef DILOCO_HAVE_NCCL
    std::string error;
    nccl = LoadNccl(&error);
    if (nccl == nullptr) return "--gpus=" + std::to_string(gpus) + " needs NCCL: " + error;
    comms.resize(gpus);
    std::vector<int> devs(gpus);
    for (int g = 0; g < gpus; ++g) devs[g] = base + g;
    const ncclResult_t rc = nccl->comm_init_all(comms.data(), gpus, devs.data());
    if (rc != ncclSuccess) {
      comms.clear();
      return std::string("ncclCommInitAll: ") + nccl->error_string(rc);
    }
#else
    return "more than one GPU needs NCCL, and this build has none";
#endif
  }
  return "";
}

// Row-major C[M,N] = alpha op(A) op(B) + beta C through column-major cuBLAS: C^T = op(B)^T op(A)^T.
std::string GptCuda::Impl::Gemm(Replica& r, bool ta, bool tb, int M, int N, int K, float alpha,
                                const float* A, int lda, const float* B, int ldb, float beta,
                                float* C, int ldc) {
  CUBLAS_TRY(blas->sgemm(r.blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N,
                         M, K, &alpha, B, ldb, A, lda, &beta, C, ldc));
  return "";
}

std::string GptCuda::Impl::GemmBatched(Replica& r, bool ta, bool tb, int M, int N, int K,
                                       float alpha, const float* A, int lda, long long sa,
                                       const float* B, int ldb, long long sb, float beta, float* C,
                                       int ldc, long long sc, int count) {
  CUBLAS_TRY(blas->sgemm_strided_batched(r.blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                         ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &alpha, B, ldb,
                                         sb, A, lda, sa, &beta, C, ldc, sc, count));
  return "";
}

std::string GptCuda::Impl::Linear(Replica& r, float* out, const float* inp, const float* w,
                                  const float* bias, int N, int C, int OC) {
  if (bias != nullptr) BroadcastRows(out, bias, N, OC, r.stream);
  return Gemm(r, false, true, N, OC, C, 1.f, inp, C, w, C, bias != nullptr ? 1.f : 0.f, out, OC);
}

std::string GptCuda::Impl::LinearBackward(Replica& r, float* dinp, float* dw, float* dbias,
                                          const float* dout, const float* inp, const float* w,
                                          int N, int C, int OC) {
  TRY(Gemm(r, false, false, N, C, OC, 1.f, dout, OC, w, C, 1.f, dinp, C));
  TRY(Gemm(r, true, false, OC, C, N, 1.f, dout, OC, inp, C, 1.f, dw, C));
  if (dbias != nullptr) BiasBackward(dbias, dout, N, OC, r.stream);
  return "";
}

std::string GptCuda::Impl::Upload(Replica& r, const int32_t* inputs, const int32_t* targets) {
  const size_t N = size_t(shape.batch) * shape.seq_len;
  CUDA_TRY(
      cudaMemcpyAsync(r.inputs, inputs, N * sizeof(int32_t), cudaMemcpyHostToDevice, r.stream));
  CUDA_TRY(
      cudaMemcpyAsync(r.targets, targets, N * sizeof(int32_t), cudaMemcpyHostToDevice, r.stream));
  return "";
}

std::string GptCuda::Impl::Forward(Replica& r) {
  const int B = shape.batch, T = shape.seq_len, C = shape.width, V = shape.vocab;
  const int NH = shape.heads, N = B * T, hs = C / NH;
  const float scale = 1.f / std::sqrt(float(hs));
  cudaStream_t s = r.stream;
  const float* p = r.params;
  EncoderForward(r.encoded, r.inputs, p + layout.wte, p + layout.wpe, B, T, C, s);
  const float* x = r.encoded;
  for (int l = 0; l < shape.layers; ++l) {
    const LayerOffsets& o = layout.layers[l];
    LayerActs& a = r.acts[l];
    LayerNormForward(a.ln1, a.ln1_mean, a.ln1_rstd, x, p + o.ln1w, p + o.ln1b, N, C, s);
    TRY(Linear(r, a.qkv, a.ln1, p + o.qkvw, p + o.qkvb, N, C, 3 * C));
    SplitHeads(a.q, a.k, a.v, a.qkv, B, T, C, NH, s);
    if (Streaming()) {
      FlashAttentionForward(r.y, a.lse, a.q, a.k, a.v, B * NH, T, hs, scale, s);
    } else {
      const long long th = (long long)T * hs, tt = (long long)T * T;
      TRY(GemmBatched(r, false, true, T, T, hs, scale, a.q, hs, th, a.k, hs, th, 0.f, a.att, T, tt,
                      B * NH));
      CausalSoftmaxForward(a.att, B * NH, T, s);
      TRY(GemmBatched(r, false, false, T, hs, T, 1.f, a.att, T, tt, a.v, hs, th, 0.f, r.y, hs, th,
                      B * NH));
    }
    MergeHeads(a.atty, r.y, B, T, C, NH, s);
    TRY(Linear(r, a.attproj, a.atty, p + o.attprojw, p + o.attprojb, N, C, C));
    ResidualForward(a.res2, x, a.attproj, int64_t(N) * C, s);
    LayerNormForward(a.ln2, a.ln2_mean, a.ln2_rstd, a.res2, p + o.ln2w, p + o.ln2b, N, C, s);
    TRY(Linear(r, a.fch, a.ln2, p + o.fcw, p + o.fcb, N, C, 4 * C));
    GeluForward(a.fch_gelu, a.fch, int64_t(N) * 4 * C, s);
    TRY(Linear(r, a.fcproj, a.fch_gelu, p + o.fcprojw, p + o.fcprojb, N, 4 * C, C));
    ResidualForward(a.res3, a.res2, a.fcproj, int64_t(N) * C, s);
    x = a.res3;
  }
  LayerNormForward(r.lnf, r.lnf_mean, r.lnf_rstd, x, p + layout.lnfw, p + layout.lnfb, N, C, s);
  TRY(Linear(r, r.logits, r.lnf, p + layout.wte, nullptr, N, C, V));
  CrossEntropyForward(r.probs, r.losses, r.scalars, r.logits, r.targets, N, V, 1.f / N, s);
  CUDA_TRY(cudaGetLastError());
  return "";
}

std::string GptCuda::Impl::Backward(Replica& r) {
  const int B = shape.batch, T = shape.seq_len, C = shape.width, V = shape.vocab;
  const int NH = shape.heads, N = B * T, hs = C / NH, L = shape.layers;
  const float scale = 1.f / std::sqrt(float(hs));
  cudaStream_t s = r.stream;
  const float* p = r.params;
  float* g = r.grads;
  CUDA_TRY(cudaMemsetAsync(g, 0, layout.total * sizeof(float), s));
  CUDA_TRY(cudaMemsetAsync(r.dblock, 0, r.dblock_floats * sizeof(float), s));
  CrossEntropyBackward(r.dlogits, r.probs, r.targets, N, V, 1.f / N, s);
  TRY(LinearBackward(r, r.dlnf, g + layout.wte, nullptr, r.dlogits, r.lnf, p + layout.wte, N, C,
                     V));
  LayerNormBackward(r.dacts[L - 1].res3, g + layout.lnfw, g + layout.lnfb, r.dlnf,
                    r.acts[L - 1].res3, p + layout.lnfw, r.lnf_mean, r.lnf_rstd, N, C, s);
  for (int l = L - 1; l >= 0; --l) {
    const LayerOffsets& o = layout.layers[l];
    const LayerActs& a = r.acts[l];
    LayerGrads& d = r.dacts[l];
    const float* x = l == 0 ? r.encoded : r.acts[l - 1].res3;
    float* dx = l == 0 ? r.dencoded : r.dacts[l - 1].res3;
    ResidualBackward(d.res2, d.fcproj, d.res3, int64_t(N) * C, s);
    TRY(LinearBackward(r, d.fch_gelu, g + o.fcprojw, g + o.fcprojb, d.fcproj, a.fch_gelu,
                       p + o.fcprojw, N, 4 * C, C));
    GeluBackward(d.fch, a.fch, d.fch_gelu, int64_t(N) * 4 * C, s);
    TRY(LinearBackward(r, d.ln2, g + o.fcw, g + o.fcb, d.fch, a.ln2, p + o.fcw, N, C, 4 * C));
    LayerNormBackward(d.res2, g + o.ln2w, g + o.ln2b, d.ln2, a.res2, p + o.ln2w, a.ln2_mean,
                      a.ln2_rstd, N, C, s);
    ResidualBackward(dx, d.attproj, d.res2, int64_t(N) * C, s);
    TRY(LinearBackward(r, d.atty, g + o.attprojw, g + o.attprojb, d.attproj, a.atty, p + o.attprojw,
                       N, C, C));
    SplitHeadsGrad(r.dy, d.atty, B, T, C, NH, s);
    if (Streaming()) {
      // The forward's y of this layer, split by head again (r.y holds the last layer's).
      SplitHeadsGrad(r.y, a.atty, B, T, C, NH, s);
      FlashAttentionBackward(r.dq, r.dk, r.dv, r.dsum, a.q, a.k, a.v, r.y, a.lse, r.dy, B * NH, T,
                             hs, scale, s);
    } else {
      // dy (B,NH,T,hs); datt = dy v^T; dv = att^T dy; softmax backward; dq, dk.
      const long long th = (long long)T * hs, tt = (long long)T * T;
      TRY(GemmBatched(r, false, true, T, T, hs, 1.f, r.dy, hs, th, a.v, hs, th, 0.f, r.datt, T, tt,
                      B * NH));
      TRY(GemmBatched(r, true, false, T, hs, T, 1.f, a.att, T, tt, r.dy, hs, th, 0.f, r.dv, hs, th,
                      B * NH));
      CausalSoftmaxBackward(r.datt, a.att, B * NH, T, s);
      TRY(GemmBatched(r, false, false, T, hs, T, scale, r.datt, T, tt, a.k, hs, th, 0.f, r.dq, hs,
                      th, B * NH));
      TRY(GemmBatched(r, true, false, T, hs, T, scale, r.datt, T, tt, a.q, hs, th, 0.f, r.dk, hs,
                      th, B * NH));
    }
    MergeQkvGrads(d.qkv, r.dq, r.dk, r.dv, B, T, C, NH, s);
    TRY(LinearBackward(r, d.ln1, g + o.qkvw, g + o.qkvb, d.qkv, a.ln1, p + o.qkvw, N, C, 3 * C));
    LayerNormBackward(dx, g + o.ln1w, g + o.ln1b, d.ln1, x, p + o.ln1w, a.ln1_mean, a.ln1_rstd, N,
                      C, s);
  }
  EncoderBackward(g + layout.wte, g + layout.wpe, r.dencoded, r.inputs, B, T, C, s);
  CUDA_TRY(cudaGetLastError());
  return "";
}

GptCuda::GptCuda(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GptCuda::~GptCuda() = default;

int GptCuda::gpus() const { return static_cast<int>(impl_->replicas.size()); }
GpuAttention GptCuda::attention() const { return impl_->shape.attention; }
std::string GptCuda::UseRanks(NcclRanks* ranks) {
  if (gpus() != 1) return "an island's GPU rank trains on one GPU, not " + std::to_string(gpus());
  impl_->ranks = ranks;
  return "";
}

std::string GptCuda::Create(const GpuShape& shape, const GpuLayout& layout, int gpus,
                            std::unique_ptr<GptCuda>* out) {
  std::string why;
  const int have = DeviceCount(&why);
  if (have < 1) return "no CUDA device" + (why.empty() ? std::string() : " (" + why + ")");
  auto impl = std::make_unique<Impl>();
  CUDA_TRY(cudaGetDevice(&impl->base));
  if (gpus < 1 || impl->base + gpus > have)
    return "asked for " + std::to_string(gpus) + " GPUs from device " + std::to_string(impl->base) +
           ", " + std::to_string(have) + " present";
  impl->shape = shape;
  impl->layout = layout;
  TRY(impl->Init(gpus));
  out->reset(new GptCuda(std::move(impl)));
  return "";
}

std::string GptCuda::Upload(const float* host) {
  const HostRange all{0, impl_->layout.total};
  return UploadRanges(host, &all, 1);
}

std::string GptCuda::Download(float* host) {
  const HostRange all{0, impl_->layout.total};
  return DownloadRanges(host, &all, 1);
}

std::string GptCuda::UploadRanges(const float* host, const HostRange* ranges, size_t count) {
  for (Replica& r : impl_->replicas) {
    CUDA_TRY(cudaSetDevice(r.device));
    for (size_t i = 0; i < count; ++i)
      CUDA_TRY(cudaMemcpyAsync(r.params + ranges[i].begin, host + ranges[i].begin,
                               (ranges[i].end - ranges[i].begin) * sizeof(float),
                               cudaMemcpyHostToDevice, r.stream));
  }
  for (Replica& r : impl_->replicas) {
    CUDA_TRY(cudaSetDevice(r.device));
    CUDA_TRY(cudaStreamSynchronize(r.stream));
  }
  return "";
}

std::string GptCuda::DownloadRanges(float* host, const HostRange* ranges, size_t count) {
  Replica& r = impl_->replicas[0];
  CUDA_TRY(cudaSetDevice(r.device));
  for (size_t i = 0; i < count; ++i)
    CUDA_TRY(cudaMemcpyAsync(host + ranges[i].begin, r.params + ranges[i].begin,
                             (ranges[i].end - ranges[i].begin) * sizeof(float),
                             cudaMemcpyDeviceToHost, r.stream));
  CUDA_TRY(cudaStreamSynchronize(r.stream));
  return "";
}

std::string AllocPinned(size_t n, float** out) {
  CUDA_TRY(cudaMallocHost(reinterpret_cast<void**>(out), n * sizeof(float)));
  return "";
}

void FreePinned(float* p) {
  if (p != nullptr) cudaFreeHost(p);
}

std::string GptCuda::TrainStep(const int32_t* inputs, const int32_t* targets, const GpuAdamW& adamw,
                               int64_t step, float grad_clip, float* loss) {
  Impl& im = *impl_;
  const size_t per = size_t(im.shape.batch) * im.shape.seq_len;
  const int G = gpus();
  for (int gi = 0; gi < G; ++gi) {
    Replica& r = im.replicas[gi];
    CUDA_TRY(cudaSetDevice(r.device));
    TRY(im.Upload(r, inputs + gi * per, targets + gi * per));
    CUDA_TRY(cudaMemsetAsync(r.scalars, 0, 2 * sizeof(float), r.stream));
    TRY(im.Forward(r));
    TRY(im.Backward(r));
  }
#ifdef DILOCO_HAVE_NCCL
  if (G > 1) {
    const NcclApi& nccl = *im.nccl;
    ncclResult_t rc = nccl.group_start();
    if (rc != ncclSuccess) return std::string("ncclGroupStart: ") + nccl.error_string(rc);
    for (int gi = 0; gi < G && rc == ncclSuccess; ++gi) {
      Replica& r = im.replicas[gi];
      rc = nccl.all_reduce(r.grads, r.grads, im.layout.total, ncclFloat, ncclSum, im.comms[gi],
                           r.stream);
    }
    // The group is closed either way (an open group would swallow the next step's calls); the
    // first failure is the one reported.
    const ncclResult_t end = nccl.group_end();
    if (rc != ncclSuccess) return std::string("ncclAllReduce: ") + nccl.error_string(rc);
    if (end != ncclSuccess) return std::string("ncclGroupEnd: ") + nccl.error_string(end);
  }
#endif
  if (NcclRanks* ranks = im.ranks) {  // one replica: its gradients and loss over the ranks
    CUDA_TRY(cudaSetDevice(im.replicas[0].device));
    TRY(ranks->AllReduceSum(im.replicas[0].grads, im.layout.total, im.replicas[0].stream,
                            "all-reduce of the gradients"));
    TRY(ranks->AllReduceSum(im.replicas[0].scalars, 1, im.replicas[0].stream,
                            "all-reduce of the loss"));
  }
  const int n = G * (im.ranks != nullptr ? im.ranks->size() : 1);
  const float bc1 = 1.f - std::pow(adamw.beta1, float(step));
  const float bc2 = 1.f - std::pow(adamw.beta2, float(step));
  const float grad_scale = 1.f / n;
  for (int gi = 0; gi < G; ++gi) {
    Replica& r = im.replicas[gi];
    CUDA_TRY(cudaSetDevice(r.device));
    if (grad_clip > 0) SumSquares(r.scalars + 1, r.grads, im.layout.total, r.stream);
    for (const GpuLayout::Tensor& t : im.layout.tensors) {
      AdamW(r.params + t.offset, r.grads + t.offset, r.m + t.offset, r.v + t.offset, t.numel,
            adamw.lr, adamw.beta1, adamw.beta2, adamw.eps, t.decayed ? adamw.weight_decay : 0.f,
            bc1, bc2, grad_scale, grad_clip, r.scalars + 1, r.stream);
    }
    CUDA_TRY(cudaGetLastError());
  }
  double sum = 0;
  for (int gi = 0; gi < G; ++gi) {
    Replica& r = im.replicas[gi];
    CUDA_TRY(cudaSetDevice(r.device));
    CUDA_TRY(
        cudaMemcpyAsync(r.host_loss, r.scalars, sizeof(float), cudaMemcpyDeviceToHost, r.stream));
  }
  for (int gi = 0; gi < G; ++gi) {
    Replica& r = im.replicas[gi];
    CUDA_TRY(cudaSetDevice(r.device));
    CUDA_TRY(cudaStreamSynchronize(r.stream));
    sum += *r.host_loss;
  }
  *loss = static_cast<float>(sum / n);
  return "";
}

std::string GptCuda::Eval(const int32_t* inputs, const int32_t* targets, int batches, float* loss) {
  Impl& im = *impl_;
  Replica& r = im.replicas[0];
  const size_t per = size_t(im.shape.batch) * im.shape.seq_len;
  CUDA_TRY(cudaSetDevice(r.device));
  CUDA_TRY(cudaMemsetAsync(r.scalars, 0, sizeof(float), r.stream));
  for (int b = 0; b < batches; ++b) {
    TRY(im.Upload(r, inputs + b * per, targets + b * per));
    TRY(im.Forward(r));
  }
  CUDA_TRY(
      cudaMemcpyAsync(r.host_loss, r.scalars, sizeof(float), cudaMemcpyDeviceToHost, r.stream));
  CUDA_TRY(cudaStreamSynchronize(r.stream));
  *loss = *r.host_loss / batches;
  return "";
}

std::string GptCuda::ForwardBackward(const int32_t* inputs, const int32_t* targets, float* loss,
                                     float* logits, float* grads) {
  Impl& im = *impl_;
  Replica& r = im.replicas[0];
  const size_t N = size_t(im.shape.batch) * im.shape.seq_len;
  CUDA_TRY(cudaSetDevice(r.device));
  TRY(im.Upload(r, inputs, targets));
  CUDA_TRY(cudaMemsetAsync(r.scalars, 0, 2 * sizeof(float), r.stream));
  TRY(im.Forward(r));
  TRY(im.Backward(r));
  CUDA_TRY(
      cudaMemcpyAsync(r.host_loss, r.scalars, sizeof(float), cudaMemcpyDeviceToHost, r.stream));
  if (logits)
    CUDA_TRY(cudaMemcpyAsync(logits, r.logits, N * im.shape.vocab * sizeof(float),
                             cudaMemcpyDeviceToHost, r.stream));
  if (grads)
    CUDA_TRY(cudaMemcpyAsync(grads, r.grads, im.layout.total * sizeof(float),
                             cudaMemcpyDeviceToHost, r.stream));
  CUDA_TRY(cudaStreamSynchronize(r.stream));
  *loss = *r.host_loss;
  return "";
}

}  // namespace diloco::model::cuda
