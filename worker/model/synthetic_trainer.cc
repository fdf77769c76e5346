#include "worker/model/synthetic_trainer.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"

namespace diloco::model {
namespace {

// Perturbations are read from a table of seeded uniform values in [-1, 1), entered at a seeded
// offset on each call: one multiply-add per moved parameter, no random draw per element.
constexpr size_t kTable = size_t{1} << 16;

class SyntheticTrainer final : public Trainer {
 public:
  SyntheticTrainer(SyntheticOptions o, Manifest m)
      : o_(std::move(o)), manifest_(std::move(m)), rng_(o_.seed), lr_(o_.lr) {
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    noise_.resize(kTable);
    for (float& x : noise_) x = u(rng_);
    params_.resize(manifest_.total_elements());
    Perturb(0, params_.size(), 0.02f);  // theta(0): small values, like a GPT-2 init
  }

  const Manifest& manifest() const override { return manifest_; }
  std::span<float> params() override { return params_; }
  uint64_t tokens_per_step() const override { return o_.tokens_per_step; }
  void SetLearningRate(float lr) override { lr_ = lr; }
  float EvalLoss() override { return std::numeric_limits<float>::quiet_NaN(); }

  float Step() override {
    o_.sleep(o_.step_time);
    // Window k of H: elements [n k / H, n (k + 1) / H), so H consecutive windows tile the buffer.
    const uint64_t n = params_.size(), h = o_.inner_steps, k = step_ % h;
    const uint64_t begin = n * k / h, end = n * (k + 1) / h;
    Perturb(begin, end - begin, lr_);
    ++step_;
    // Something a progress line can show: ln(vocab) at the start, easing towards half of it.
    const double progress = static_cast<double>(step_) / static_cast<double>(h);
    return static_cast<float>(std::log(o_.vocab) * (0.5 + 0.5 / std::sqrt(1 + progress)));
  }

 private:
  // params[begin, begin + count) += scale * the table, from a fresh seeded offset.
  void Perturb(uint64_t begin, uint64_t count, float scale) {
    size_t t = rng_() & (kTable - 1);
    float* p = params_.data() + begin;
    for (uint64_t done = 0; done < count; t = 0) {
      const size_t len = std::min<uint64_t>(count - done, kTable - t);
      const float* q = noise_.data() + t;
      for (size_t j = 0; j < len; ++j) p[done + j] += scale * q[j];
      done += len;
    }
  }

  SyntheticOptions o_;
  Manifest manifest_;
  std::mt19937_64 rng_;
  float lr_;
  std::vector<float> noise_;
  std::vector<float> params_;
  uint64_t step_ = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<Trainer>> MakeSyntheticTrainer(SyntheticOptions options) {
  if (options.inner_steps < 1)
    return absl::InvalidArgumentError("synthetic learner: inner steps must be at least 1");
  if (options.step_time < absl::ZeroDuration() || options.step_time == absl::InfiniteDuration())
    return absl::InvalidArgumentError(
        absl::StrCat("--synthetic_step_time=", absl::FormatDuration(options.step_time),
                     ": expected a finite duration >= 0"));
  if (!options.sleep) return absl::InvalidArgumentError("synthetic learner: no sleep function");
  if (options.vocab < 2)
    return absl::InvalidArgumentError("synthetic learner: the vocabulary must be at least 2");
  if (options.manifest.total_elements() == 0)
    return absl::InvalidArgumentError("synthetic learner: the model has no parameters");
  Manifest m = options.manifest;
  return std::unique_ptr<Trainer>(new SyntheticTrainer(std::move(options), std::move(m)));
}

}  // namespace diloco::model
