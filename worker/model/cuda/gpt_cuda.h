// The GPT on CUDA GPUs: one replica per GPU, data-parallel, gradients summed with an NCCL
// all-reduce every step (over one process's GPUs, or over an island's ranks: UseRanks). Parameters,
// gradients, AdamW state and activations live on the devices, allocated once. Matrix products run
// on cuBLAS in TF32 (fp32 storage and accumulation), the other layers are the kernels of
// kernels.cuh. A step enqueues everything on the replicas' streams and synchronises once at its end
// (to return the loss).
//
// Plain C++17 (no Abseil) so both nvcc and the C++20 trainer include it: errors are returned as
// strings, empty on success.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "worker/model/layer_offsets.h"

namespace diloco::model::cuda {

// How attention runs: streaming (flash_attention.cuh: scores never stored, B x NH x T floats
// kept per layer) for head sizes it takes (up to 128), else materialized (scores and softmax as
// B x NH x T x T per layer through cuBLAS batched GEMMs, the reference it is tested against).
// kAuto (the trainer's default) takes materialized where its scores fit (ChooseAttention): on
// an H200 it trains GPT-2 124M and 350M about twice as fast as the streaming kernels, whose
// one-thread-per-row fp32 loops use no tensor cores (benchmarks/gpu/RESULTS.md, "Model").
enum class GpuAttention { kAuto, kStreaming, kMaterialized };

struct GpuShape {
  int vocab, context, layers, heads, width;  // the GptConfig
  int batch, seq_len;                        // per replica
  GpuAttention attention = GpuAttention::kAuto;
};

// The attention a replica of `s` runs with `free_bytes` of device memory free before it
// allocates: s.attention unless kAuto; for kAuto, materialized when its scores, (layers + 1)
// x B x NH x T x T floats (every layer's softmax kept for the backward, plus one gradient
// buffer), take at most a quarter of free_bytes (the rest is for the model, its AdamW state and
// the other activations, and for the other programs on the GPU), else streaming.
inline GpuAttention ChooseAttention(const GpuShape& s, size_t free_bytes) {
  if (s.attention != GpuAttention::kAuto) return s.attention;
  const double scores = double(s.layers + 1) * s.batch * s.heads * double(s.seq_len) *
                        double(s.seq_len) * sizeof(float);
  return scores <= double(free_bytes) / 4 ? GpuAttention::kMaterialized : GpuAttention::kStreaming;
}

inline const char* AttentionName(GpuAttention a) {
  return a == GpuAttention::kAuto        ? "auto"
         : a == GpuAttention::kStreaming ? "streaming"
                                         : "materialized";
}

struct GpuLayout {
  uint64_t wte = 0, wpe = 0, lnfw = 0, lnfb = 0, total = 0;
  std::vector<LayerOffsets> layers;
  // Every tensor as (offset, numel, decayed) for AdamW.
  struct Tensor {
    uint64_t offset, numel;
    bool decayed;
  };
  std::vector<Tensor> tensors;
};

// Elements [begin, end) of the flat parameter buffer.
struct HostRange {
  uint64_t begin, end;
};

// Page-locked host memory for `n` floats (copies to and from it run at the link's speed, and
// asynchronously), freed by FreePinned.
std::string AllocPinned(size_t n, float** out);
void FreePinned(float* p);

struct GpuAdamW {
  float lr, beta1, beta2, eps, weight_decay;
};

// Number of usable GPUs; 0 when the runtime reports any error (no driver, no device), with the
// runtime's reason in *why when given.
int DeviceCount(std::string* why = nullptr);

class NcclRanks;

class GptCuda {
 public:
  // Replica g runs on device base + g, base the calling thread's current device (0 unless
  // cudaSetDevice chose another: an island rank's local rank).
  static std::string Create(const GpuShape& shape, const GpuLayout& layout, int gpus,
                            std::unique_ptr<GptCuda>* out);
  ~GptCuda();
  GptCuda(const GptCuda&) = delete;
  GptCuda& operator=(const GptCuda&) = delete;

  int gpus() const;
  // One GPU rank of an island (nccl_ranks.h; one replica only): from the next TrainStep on,
  // the gradients and the loss are summed over `ranks` too and scaled by 1 / (ranks x gpus),
  // so R ranks at batch B step as one replica at batch R x B. `ranks` must outlive this.
  std::string UseRanks(NcclRanks* ranks);
  // The attention the replicas run (never kAuto: Create resolved it).
  GpuAttention attention() const;
  // Parameters host -> every replica, and replica 0 -> host (both synchronous). AdamW state is
  // kept.
  std::string Upload(const float* host);
  std::string Download(float* host);
  // The same for the given ranges only; `host` is the whole flat buffer (element 0), so range r
  // travels between host + r.begin and the device's own element r.begin.
  std::string UploadRanges(const float* host, const HostRange* ranges, size_t count);
  std::string DownloadRanges(float* host, const HostRange* ranges, size_t count);

  // One training step. inputs/targets hold gpus * batch * seq_len tokens (replica g takes slice
  // g). Forward, backward, all-reduce, global-norm clip and AdamW (step is 1-based); *loss is
  // the mean loss over all replicas (and ranks, with UseRanks).
  std::string TrainStep(const int32_t* inputs, const int32_t* targets, const GpuAdamW& adamw,
                        int64_t step, float grad_clip, float* loss);
  // Mean loss over `batches` batches (batch * seq_len tokens each, consecutive in inputs and
  // targets) on replica 0, forward only.
  std::string Eval(const int32_t* inputs, const int32_t* targets, int batches, float* loss);
  // For tests: forward and backward of one batch on replica 0 without an update; copies the
  // loss, the logits (batch*seq_len*vocab) and the gradients (layout.total) to the host.
  std::string ForwardBackward(const int32_t* inputs, const int32_t* targets, float* loss,
                              float* logits, float* grads);

  struct Impl;

 private:
  explicit GptCuda(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace diloco::model::cuda
