// The CUDA trainer (built only with DILOCO_HAVE_CUDA; the target diloco_model_cuda defines
// DILOCO_MODEL_HAVE_CUDA for its users). Parameters live on the GPUs; the Trainer::params() span
// is a host mirror in page-locked memory (4 bytes per parameter):
//   * ParamRange(offset, n) copies the part of that range the mirror does not already hold
//     since the last step from the device, and marks the range as possibly edited: the next
//     Step() or EvalLoss() first copies every range handed out back to every GPU, and only
//     those (mirror_ranges.h). A push therefore moves its fragment's pieces down and up, not
//     the model. params() is ParamRange over the whole model. So the generic sync-client pattern
//     "read/write parameters between steps" just works, as long as the range is asked for again
//     (not a span cached from before a step) when fresh values are needed.
//   * CopyParamsToHost() / CopyParamsToDevice() do the two whole copies explicitly.
// AdamW state stays on the GPUs across all copies.
// As one GPU rank of an island (UseRanks) it trains on its slice of the island's batch
// (TrainerOptions::data_slice of data_slices, drawn as the CPU trainer draws it) and sums its
// gradients and loss with the other ranks' over NCCL every step (nccl_ranks.h).
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/batcher.h"
#include "worker/model/cuda/gpt_cuda.h"
#include "worker/model/cuda/nccl_ranks.h"
#include "worker/model/mirror_ranges.h"
#include "worker/model/param_layout.h"
#include "worker/model/trainer_options.h"
#include "worker/trainer.h"

namespace diloco::model {

class CudaTrainer final : public Trainer {
 public:
  const Manifest& manifest() const override { return layout_.manifest; }
  std::span<float> params() override;
  std::span<float> ParamRange(uint64_t offset, uint64_t n) override;
  float Step() override;
  uint64_t tokens_per_step() const override;
  void SetLearningRate(float lr) override { lr_ = lr; }
  float EvalLoss() override;

  absl::Status CopyParamsToHost();
  absl::Status CopyParamsToDevice();
  int gpus() const { return gpt_->gpus(); }
  // From the next Step on, gradients and loss are averaged over `ranks` (one GPU only).
  absl::Status UseRanks(std::unique_ptr<cuda::NcclRanks> ranks);
  cuda::GpuAttention attention() const { return gpt_->attention(); }
  absl::Status error() const override { return error_; }

 private:
  friend absl::StatusOr<std::unique_ptr<CudaTrainer>> MakeCudaTrainer(const TrainerOptions&);
  CudaTrainer() = default;
  absl::Status SyncIfEdited();

  TrainerOptions o_;
  ParamLayout layout_;
  std::unique_ptr<cuda::NcclRanks> ranks_;  // outlives gpt_, which uses it
  std::unique_ptr<cuda::GptCuda> gpt_;
  data::DataStreams data_;
  std::vector<std::unique_ptr<data::Batcher>> train_;  // one per GPU
  std::unique_ptr<data::Batcher> heldout_;
  std::unique_ptr<float, void (*)(float*)> host_{nullptr, &cuda::FreePinned};  // the mirror
  std::span<float> host_params_;  // host_ as a span of the model's size
  MirrorRanges mirror_;           // the ranges of the mirror handed out since the last upload
  std::vector<int32_t> inputs_, targets_, eval_inputs_, eval_targets_;
  int64_t step_ = 0;
  std::optional<float> lr_;  // SetLearningRate's, once set
  absl::Status error_;
};

// Number of CUDA GPUs usable now (0 without a driver or device: any runtime error counts as 0,
// and its reason is written to *why when given).
int CudaDeviceCount(std::string* why = nullptr);

absl::StatusOr<std::unique_ptr<CudaTrainer>> MakeCudaTrainer(const TrainerOptions& options);

}  // namespace diloco::model
