#include "worker/model/cuda/cuda_trainer.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "worker/model/gpt/gpt_trainer_family.h"

namespace diloco::model {

int CudaDeviceCount(std::string* why) { return cuda::DeviceCount(why); }

std::span<float> CudaTrainer::params() { return ParamRange(0, host_params_.size()); }

std::span<float> CudaTrainer::ParamRange(uint64_t offset, uint64_t n) {
  const std::vector<ElementRange> missing = mirror_.Claim(offset, offset + n);
  std::vector<cuda::HostRange> ranges;
  ranges.reserve(missing.size());
  for (const ElementRange& r : missing) ranges.push_back({r.begin, r.end});
  if (!ranges.empty())
    if (std::string e = gpt_->DownloadRanges(host_params_.data(), ranges.data(), ranges.size());
        !e.empty())
      error_ = absl::InternalError(e);
  return host_params_.subspan(offset, n);
}

absl::Status CudaTrainer::CopyParamsToHost() {
  std::string e = gpt_->Download(host_params_.data());
  if (!e.empty()) return absl::InternalError(e);
  return absl::OkStatus();
}

absl::Status CudaTrainer::CopyParamsToDevice() {
  std::string e = gpt_->Upload(host_params_.data());
  if (!e.empty()) return absl::InternalError(e);
  mirror_.TakeAll();
  return absl::OkStatus();
}

absl::Status CudaTrainer::SyncIfEdited() {
  if (mirror_.empty()) return absl::OkStatus();
  std::vector<cuda::HostRange> ranges;
  for (const ElementRange& r : mirror_.TakeAll()) ranges.push_back({r.begin, r.end});
  std::string e = gpt_->UploadRanges(host_params_.data(), ranges.data(), ranges.size());
  if (!e.empty()) return absl::InternalError(e);
  return absl::OkStatus();
}

absl::Status CudaTrainer::UseRanks(std::unique_ptr<cuda::NcclRanks> ranks) {
  if (std::string e = gpt_->UseRanks(ranks.get()); !e.empty())
    return absl::FailedPreconditionError(e);
  ranks_ = std::move(ranks);
  return absl::OkStatus();
}

uint64_t CudaTrainer::tokens_per_step() const { return inputs_.size(); }

float CudaTrainer::Step() {
  if (absl::Status st = SyncIfEdited(); !st.ok()) {
    error_ = st;
    return NAN;
  }
  const size_t per = size_t(o_.batch_size) * o_.seq_len;
  for (size_t g = 0; g < train_.size(); ++g)
    train_[g]->Next(std::span<int32_t>(inputs_).subspan(g * per, per),
                    std::span<int32_t>(targets_).subspan(g * per, per));
  ++step_;
  const cuda::GpuAdamW a{lr_ ? *lr_ : LearningRate(o_, step_), o_.adamw.beta1, o_.adamw.beta2,
                         o_.adamw.eps, o_.adamw.weight_decay};
  float loss = NAN;
  std::string e = gpt_->TrainStep(inputs_.data(), targets_.data(), a, step_, o_.grad_clip, &loss);
  if (!e.empty()) {
    error_ = absl::InternalError(e);
    return NAN;
  }
  return loss;
}

float CudaTrainer::EvalLoss() {
  if (absl::Status st = SyncIfEdited(); !st.ok()) {
    error_ = st;
    return NAN;
  }
  float loss = NAN;
  std::string e = gpt_->Eval(eval_inputs_.data(), eval_targets_.data(), o_.eval_batches, &loss);
  if (!e.empty()) {
    error_ = absl::InternalError(e);
    return NAN;
  }
  return loss;
}

absl::StatusOr<std::unique_ptr<CudaTrainer>> MakeCudaTrainer(const TrainerOptions& options) {
  absl::StatusOr<GptConfig> config = GptConfigOf(options.model, "the CUDA trainer");
  if (!config.ok()) return config.status();
  absl::StatusOr<TrainerOptions> o = ResolveOptions(options);
  if (!o.ok()) return o.status();
  absl::StatusOr<ParamLayout> layout = MakeParamLayout(*config);
  if (!layout.ok()) return layout.status();
  std::unique_ptr<CudaTrainer> t(new CudaTrainer());
  t->o_ = *o;
  t->layout_ = *std::move(layout);
  cuda::GpuShape shape{config->vocab, config->context, config->layers, config->heads,
                       config->width, o->batch_size,   o->seq_len};
  cuda::GpuLayout gl;
  gl.wte = t->layout_.wte;
  gl.wpe = t->layout_.wpe;
  gl.lnfw = t->layout_.lnfw;
  gl.lnfb = t->layout_.lnfb;
  gl.total = t->layout_.total;
  gl.layers = t->layout_.layers;
  for (const TensorSpec& s : t->layout_.manifest.tensors())
    gl.tensors.push_back({s.offset, s.numel(), IsDecayed(s)});
  std::string e = cuda::GptCuda::Create(shape, gl, o->gpus, &t->gpt_);
  if (!e.empty()) return absl::UnavailableError(absl::StrCat("CUDA trainer: ", e));
  absl::StatusOr<data::DataStreams> d = data::LoadData(o->data, o->model.vocab);
  if (!d.ok()) return d.status();
  if (d->train.size() <= size_t(o->seq_len) || d->heldout.size() <= size_t(o->seq_len))
    return absl::InvalidArgumentError("data: too few tokens for one sequence");
  t->data_ = *std::move(d);
  for (int g = 0; g < o->gpus; ++g)
    t->train_.push_back(std::make_unique<data::Batcher>(
        t->data_.train, o->batch_size, o->seq_len,
        o->seed * 31 + o->data.worker_index + 1 + uint64_t(g) * 7919, o->data_slice,
        o->data_slices));
  t->heldout_ = std::make_unique<data::Batcher>(t->data_.heldout, o->batch_size, o->seq_len, 0);
  const size_t per = size_t(o->batch_size) * o->seq_len;
  t->inputs_.resize(per * o->gpus);
  t->targets_.resize(per * o->gpus);
  t->eval_inputs_.resize(per * o->eval_batches);
  t->eval_targets_.resize(per * o->eval_batches);
  for (int i = 0; i < o->eval_batches; ++i)
    t->heldout_->Fixed(i, o->eval_batches,
                       std::span<int32_t>(t->eval_inputs_).subspan(i * per, per),
                       std::span<int32_t>(t->eval_targets_).subspan(i * per, per));
  float* host = nullptr;
  if (std::string e = cuda::AllocPinned(t->layout_.total, &host); !e.empty())
    return absl::UnavailableError(absl::StrCat("CUDA trainer: pinned host mirror: ", e));
  t->host_.reset(host);
  t->host_params_ = std::span<float>(host, t->layout_.total);
  std::fill(t->host_params_.begin(), t->host_params_.end(), 0.f);
  InitGpt2(t->layout_, o->init_seed, t->host_params_);
  if (absl::Status st = t->CopyParamsToDevice(); !st.ok()) return st;
  return t;
}

}  // namespace diloco::model
