// The CUDA trainer (built only with DILOCO_HAVE_CUDA; the target diloco_model_cuda defines
// DILOCO_MODEL_HAVE_CUDA for its users). Parameters live on the GPUs; the Trainer::params() span
// is a host mirror:
//   * params() copies the device parameters into the mirror (synchronously) and marks the
//     mirror as possibly edited: the next Step() or EvalLoss() first copies it back to every GPU.
//     So the generic sync-client pattern "read/write params() between steps" just works, as
//     long as params() is called again (not a span cached from earlier) when fresh values are
//     needed.
//   * CopyParamsToHost() / CopyParamsToDevice() do the two copies explicitly, for a client that
//     keeps the span.
// AdamW state stays on the GPUs across both copies.
#pragma once

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/data/batcher.h"
#include "worker/model/cuda/gpt_cuda.h"
#include "worker/model/param_layout.h"
#include "worker/model/trainer_options.h"
#include "worker/trainer.h"

namespace diloco::model {

class CudaTrainer final : public Trainer {
 public:
  const Manifest& manifest() const override { return layout_.manifest; }
  std::span<float> params() override;
  float Step() override;
  uint64_t tokens_per_step() const override;
  float EvalLoss() override;

  absl::Status CopyParamsToHost();
  absl::Status CopyParamsToDevice();
  int gpus() const { return gpt_->gpus(); }
  absl::Status error() const override { return error_; }

 private:
  friend absl::StatusOr<std::unique_ptr<CudaTrainer>> MakeCudaTrainer(const TrainerOptions&);
  CudaTrainer() = default;
  absl::Status SyncIfEdited();

  TrainerOptions o_;
  ParamLayout layout_;
  std::unique_ptr<cuda::GptCuda> gpt_;
  data::DataStreams data_;
  std::vector<std::unique_ptr<data::Batcher>> train_;  // one per GPU
  std::unique_ptr<data::Batcher> heldout_;
  std::vector<float> host_params_;
  std::vector<int32_t> inputs_, targets_, eval_inputs_, eval_targets_;
  bool host_edited_ = false;
  int64_t step_ = 0;
  absl::Status error_;
};

// Number of CUDA GPUs usable now (0 without a driver or device: any runtime error counts as 0).
int CudaDeviceCount();

absl::StatusOr<std::unique_ptr<CudaTrainer>> MakeCudaTrainer(const TrainerOptions& options);

}  // namespace diloco::model
