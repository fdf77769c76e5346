#include "server/round_merge.h"

#include <algorithm>
#include <span>

#include "kernels/outer.h"

namespace diloco::server {
namespace {

class WeightedMean final : public RoundMerge {
 public:
  explicit WeightedMean(uint64_t numel) : numel_(numel) {}

  Target Admit(float rel, bool first, std::shared_ptr<wire::Bytes>& acc,
               BufferPool& pool) override {
    if (!acc) acc = pool.Take(numel_ * sizeof(float));
    return {Floats(*acc).data(), rel, first};
  }

  void Close(double share, double weight_sum, uint32_t merged, std::shared_ptr<wire::Bytes>& acc,
             BufferPool&) override {
    const double inv = merged > 0 ? share / weight_sum : 1.0;
    if (inv == 1.0 || !acc) return;
    for (float& a : Floats(*acc)) a *= static_cast<float>(inv);
  }

 private:
  uint64_t numel_;
};

class Rda final : public RoundMerge {
 public:
  explicit Rda(uint64_t numel) : numel_(numel) {}

  Target Admit(float rel, bool, std::shared_ptr<wire::Bytes>&, BufferPool&) override {
    deltas_.emplace_back(numel_, 0.0f);
    weights_.push_back(rel);
    return {deltas_.back().data(), 1.0f, true};
  }

  void Close(double share, double, uint32_t, std::shared_ptr<wire::Bytes>& acc,
             BufferPool& pool) override {
    if (!acc) acc = pool.Take(numel_ * sizeof(float));  // RdaMerge's output
    const std::span<float> out = Floats(*acc);
    std::vector<std::span<const float>> deltas(deltas_.begin(), deltas_.end());
    if (!kernels::RdaMerge(deltas, weights_, out).ok())
      std::fill(out.begin(), out.end(), 0.0f);  // no push, or all-zero weights: no move
    deltas_.clear();
    weights_.clear();
    if (share != 1.0)
      for (float& a : out) a *= static_cast<float>(share);
  }

 private:
  uint64_t numel_;
  std::vector<std::vector<float>> deltas_;  // one dense delta per push of the open round
  std::vector<float> weights_;
};

}  // namespace

std::unique_ptr<RoundMerge> MakeRoundMerge(MergeRule rule, uint64_t numel) {
  if (rule == MergeRule::kRda) return std::make_unique<Rda>(numel);
  return std::make_unique<WeightedMean>(numel);
}

}  // namespace diloco::server
