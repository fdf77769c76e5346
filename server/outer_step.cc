#include "server/outer_step.h"

#include "kernels/outer.h"

namespace diloco::server {
namespace {

// Shares are in (0, 1] and the spans match by construction: the kernels' checks never fail here.

class Full final : public OuterStep {
 public:
  explicit Full(const kernels::NesterovParams& p) : p_(p) {}

  void StepPart(double, std::span<float> theta, std::span<float> m,
                std::span<const float> d) override {
    kernels::NesterovStep(p_, theta, m, d);
  }

 private:
  kernels::NesterovParams p_;
};

class Partial final : public OuterStep {
 public:
  explicit Partial(const kernels::NesterovParams& p) : p_(p) {}

  void StepPart(double share, std::span<float> theta, std::span<float> m,
                std::span<const float> d) override {
    (void)kernels::PartialNesterovStep(p_, share, theta, m, d);
  }

 private:
  kernels::NesterovParams p_;
};

class Composed final : public OuterStep {
 public:
  explicit Composed(const kernels::NesterovParams& p) : p_(p) {}

  void StepPart(double share, std::span<float> theta, std::span<float> m,
                std::span<const float> d) override {
    double phase = phase_;  // every part steps from the phase the round found
    (void)kernels::ComposedNesterovStep(p_, share, &phase, theta, m, d);
    next_ = phase;
  }
  void Commit() override { phase_ = next_; }

 private:
  kernels::NesterovParams p_;
  // The share of the current full round stepped on so far (not checkpointed: a restarted shard
  // begins a new full round), and where the round being stepped takes it.
  double phase_ = 0, next_ = 0;
};

class Delayed final : public OuterStep {
 public:
  Delayed(const kernels::NesterovParams& p, int period, uint64_t numel) : dn_(p, period, numel) {}

  bool PerArrival() const override { return true; }
  bool Splits() const override { return false; }  // the kernel takes the fragment whole
  void StepPart(double, std::span<float> theta, std::span<float> m,
                std::span<const float> d) override {
    (void)dn_.Arrive(theta, m, d);
  }

 private:
  kernels::DelayedNesterov dn_;
};

class Sparse final : public OuterStep {
 public:
  explicit Sparse(float lr) : lr_(lr) {}

  void StepPart(double, std::span<float> theta, std::span<float>,
                std::span<const float> d) override {
    (void)kernels::SgdStep(lr_, theta, d);
  }

 private:
  float lr_;
};

}  // namespace

std::unique_ptr<OuterStep> MakeSparseStep(float lr) { return std::make_unique<Sparse>(lr); }

std::unique_ptr<OuterStep> MakeOuterStep(OuterMode mode, RoundStep step,
                                         const kernels::NesterovParams& p, int dn_period,
                                         uint64_t numel) {
  if (mode == OuterMode::kDelayedNesterov) return std::make_unique<Delayed>(p, dn_period, numel);
  switch (step) {
    case RoundStep::kPartial:
      return std::make_unique<Partial>(p);
    case RoundStep::kComposed:
      return std::make_unique<Composed>(p);
    case RoundStep::kFull:
      break;
  }
  return std::make_unique<Full>(p);
}

}  // namespace diloco::server
