// Everything a trainer (CPU or CUDA) needs: the model (a family's, by name: trainer_family.h),
// the batch, AdamW, the seed of the initial parameters, the data and the held-out evaluation,
// threads and GPUs.
#pragma once

#include <cstdint>

#include "kernels/optim.h"
#include "worker/data/source.h"
#include "worker/model/trainer_family.h"

namespace diloco::model {

struct TrainerOptions {
  // The family and its config: ResolveTrainerModel, or a family's own helper (GptTrainerModel).
  TrainerModel model;
  int batch_size = 8;  // sequences per step (per GPU on the CUDA backend)
  int seq_len = 0;     // tokens per sequence; 0 = model.context
  // AdamW. weight_decay applies to 2-D tensors only (matrices and embeddings); biases and
  // LayerNorm parameters are never decayed (GPT-2 / llm.c practice).
  kernels::AdamWParams adamw{
      .lr = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f};
  int warmup_steps = 0;  // linear learning-rate warm-up from lr/warmup_steps
  // Cosine decay of the learning rate from lr to min_lr_fraction * lr over steps
  // [warmup_steps, decay_steps]; constant min_lr after. 0 = constant lr after the warm-up.
  int decay_steps = 0;
  float min_lr_fraction = 0.1f;
  float grad_clip = 1.0f;     // clip the global gradient norm to this (0 = off)
  uint64_t seed = 1234;       // the batch order
  uint64_t init_seed = 1234;  // initial parameters (GPT-2 init)
  data::DataOptions data;
  int eval_batches = 8;  // held-out batches of (batch_size, seq_len) per EvalLoss
  int threads = 0;       // CPU: the trainer's threads (cpu_threads.h, process-wide); 0 = leave
                         // OpenBLAS's own threading as it is
  int gpus = 1;          // CUDA: GPUs of this worker, data-parallel with NCCL all-reduce
  // An island's rank trains on slice `data_slice` of `data_slices` of the batch one worker with
  // batch_size x data_slices would draw (data::Batcher); 0 of 1 for a lone worker.
  int data_slice = 0;
  int data_slices = 1;
};

// True for the tensors AdamW decays, in every family: the 2-D ones (matrices and embeddings), as
// in GPT-2/llm.c; biases and normalisation gains are not decayed.
inline bool IsDecayed(const TensorSpec& t) { return t.shape.size() == 2; }

// The learning rate of 1-based step `step` under the warm-up and decay above.
float LearningRate(const TrainerOptions& options, int64_t step);

// The same shape with the decay driven by `progress`, the fraction (clamped to [0, 1]) of the
// decay phase that has passed: a linear warm-up over steps 1..warmup_steps, then cosine from
// peak to min_fraction * peak. A worker whose run is bounded by time passes elapsed / duration.
float CosineLearningRate(float peak, int warmup_steps, float min_fraction, int64_t step,
                         double progress);

// The trained model's vocabulary (the data's token range) and context (the default seq_len).
inline int Vocab(const TrainerOptions& o) { return o.model.vocab; }
inline int Context(const TrainerOptions& o) { return o.model.context; }

// seq_len resolved (0 -> context) and every field checked.
absl::StatusOr<TrainerOptions> ResolveOptions(const TrainerOptions& options);

}  // namespace diloco::model
