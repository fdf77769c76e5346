#include "worker/model/cpu_trainer.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "kernels/optim.h"
#include "worker/data/batcher.h"
#include "worker/model/heldout.h"
#include "worker/model/trainer_family.h"

namespace diloco::model {
namespace {

class CpuTrainer final : public Trainer {
 public:
  CpuTrainer(const TrainerOptions& o, std::unique_ptr<CpuModel> model, data::DataStreams d)
      : o_(o),
        model_(std::move(model)),
        data_(std::move(d)),
        train_(data_.train, o.batch_size, o.seq_len, o.seed * 31 + o.data.worker_index + 1,
               o.data_slice, o.data_slices),
        heldout_(data_.heldout, o.batch_size, o.seq_len, 0),
        m_(model_->params().size(), 0.0f),
        v_(model_->params().size(), 0.0f),
        inputs_(size_t(o.batch_size) * o.seq_len),
        targets_(inputs_.size()) {
    model_->Init(o.init_seed);
  }

  const Manifest& manifest() const override { return model_->manifest(); }
  std::span<float> params() override { return model_->params(); }
  uint64_t tokens_per_step() const override { return inputs_.size(); }
  void SetLearningRate(float lr) override { lr_ = lr; }
  absl::Status SetGradientReducer(GradientReducer reducer) override {
    reduce_ = std::move(reducer);
    return absl::OkStatus();
  }
  absl::Status error() const override { return error_; }

  float Step() override {
    if (!error_.ok()) return std::nanf("");
    train_.Next(inputs_, targets_);
    float loss = static_cast<float>(model_->Forward(inputs_.data(), targets_.data()));
    model_->Backward();
    std::span<float> g = model_->grads();
    if (reduce_) {
      if (absl::Status st = reduce_(g, loss); !st.ok()) {
        error_ = st;
        return std::nanf("");
      }
    }
    if (o_.grad_clip > 0) {
      double sq = 0;
      for (float x : g) sq += double(x) * x;
      const double norm = std::sqrt(sq);
      if (norm > o_.grad_clip) {
        const float s = static_cast<float>(o_.grad_clip / norm);
        for (float& x : g) x *= s;
      }
    }
    ++step_;
    kernels::AdamWParams p = o_.adamw;
    p.lr = lr_ ? *lr_ : LearningRate(o_, step_);
    std::span<float> w = model_->params();
    for (const TensorSpec& t : manifest().tensors()) {
      kernels::AdamWParams pt = p;
      if (!IsDecayed(t)) pt.weight_decay = 0;
      const size_t off = t.offset, n = t.numel();
      kernels::AdamWStep(pt, step_, w.subspan(off, n), g.subspan(off, n),
                         std::span<float>(m_).subspan(off, n),
                         std::span<float>(v_).subspan(off, n));
    }
    return loss;
  }

  std::string DataPosition() const override { return train_.Position(); }
  absl::Status SetDataPosition(std::string_view position) override {
    return train_.SetPosition(position);
  }
  std::optional<OptimizerView> optimizer_state() const override {
    return OptimizerView{step_, m_, v_};
  }
  absl::Status RestoreOptimizer(int64_t step, std::span<const float> m,
                                std::span<const float> v) override {
    if (step < 0 || m.size() != m_.size() || v.size() != v_.size())
      return absl::InvalidArgumentError(absl::StrCat("optimizer state: step ", step, ", ", m.size(),
                                                     " and ", v.size(), " moments for a model of ",
                                                     m_.size(), " parameters"));
    std::copy(m.begin(), m.end(), m_.begin());
    std::copy(v.begin(), v.end(), v_.begin());
    step_ = step;
    return absl::OkStatus();
  }

  float EvalLoss() override {
    return static_cast<float>(HeldoutLoss(*model_, heldout_, o_.eval_batches));
  }

 private:
  TrainerOptions o_;
  std::unique_ptr<CpuModel> model_;
  data::DataStreams data_;
  data::Batcher train_, heldout_;
  std::vector<float> m_, v_;
  std::vector<int32_t> inputs_, targets_;
  int64_t step_ = 0;
  std::optional<float> lr_;  // SetLearningRate's, once set
  GradientReducer reduce_;
  absl::Status error_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Trainer>> MakeCpuTrainer(const TrainerOptions& options) {
  absl::StatusOr<TrainerOptions> o = ResolveOptions(options);
  if (!o.ok()) return o.status();
  if (o->threads > 0) SetCpuThreads(o->threads);
  absl::StatusOr<std::unique_ptr<CpuModel>> model =
      MakeCpuModel(o->model, o->batch_size, o->seq_len);
  if (!model.ok()) return model.status();
  absl::StatusOr<data::DataStreams> d = data::LoadData(o->data, o->model.vocab);
  if (!d.ok()) return d.status();
  if (d->train.size() <= size_t(o->seq_len) || d->heldout.size() <= size_t(o->seq_len))
    return absl::InvalidArgumentError(absl::StrCat(
        "data: need more than seq_len ", o->seq_len, " tokens to train and to hold out (have ",
        d->train.size(), " and ", d->heldout.size(), ")"));
  return std::unique_ptr<Trainer>(new CpuTrainer(*o, *std::move(model), *std::move(d)));
}

}  // namespace diloco::model
