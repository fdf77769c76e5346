#include "worker/link_plan.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"

namespace diloco::worker {

namespace {

// Before the first update is measured, assume whole fp32 values come down.
constexpr double kAssumedDownBytesPerParam = 4.0;
// H grows by this factor a rung.
constexpr double kHGrowth = 1.25;

}  // namespace

LinkPlanner::LinkPlanner(LinkPlanOptions opt, std::vector<uint64_t> fragment_numels)
    : opt_(std::move(opt)), numels_(std::move(fragment_numels)) {
  for (uint64_t n : numels_) params_ += n;
  opt_.h_min = std::max<uint32_t>(opt_.h_min, 1);
  opt_.h_max = std::max(opt_.h_max, opt_.h_min);
  const uint32_t last = static_cast<uint32_t>(opt_.codecs.size()) - 1;
  for (uint32_t c = 0; c < last; ++c) rungs_.push_back({c, opt_.h_min});
  for (double h = opt_.h_min;; h *= kHGrowth) {
    const uint32_t rounded = static_cast<uint32_t>(std::min<double>(std::ceil(h), opt_.h_max));
    if (rungs_.empty() || rungs_.back().h != rounded || rungs_.back().codec != last)
      rungs_.push_back({last, rounded});
    if (rounded >= opt_.h_max) break;
  }
  choice_ = Rung(0);
}

LinkChoice LinkPlanner::Rung(size_t i) const {
  LinkChoice c;
  c.codec = opt_.codecs[rungs_[i].codec];
  c.h = rungs_[i].h;
  return c;
}

double LinkPlanner::Need(const kernels::Codec& codec, const LinkMeasure& m) const {
  double up = 0;
  for (uint64_t n : numels_) up += static_cast<double>(kernels::EncodedSize(codec, n));
  const double per_param =
      m.down_bytes_per_param > 0 ? m.down_bytes_per_param : kAssumedDownBytesPerParam;
  const double down = per_param * static_cast<double>(params_);
  return up / m.up_bytes_per_s + down / m.down_bytes_per_s;
}

size_t LinkPlanner::FinestFitting(const LinkMeasure& m, double margin) const {
  for (size_t i = 0; i < rungs_.size(); ++i) {
    const RungSpec& r = rungs_[i];
    if (margin * Need(opt_.codecs[r.codec], m) <= r.h * m.step_s) return i;
  }
  return rungs_.size() - 1;
}

bool LinkPlanner::Update(const LinkMeasure& m) {
  if (!(m.up_bytes_per_s > 0) || !(m.down_bytes_per_s > 0) || !(m.step_s > 0)) return false;
  // Coarser at once when the rung no longer fits; finer only as far as the stricter margin allows.
  const size_t fits = FinestFitting(m, opt_.margin);
  const size_t fits_strictly = FinestFitting(m, opt_.margin / opt_.hysteresis);
  const size_t before = rung_;
  rung_ = std::clamp(rung_, fits, std::max(fits, fits_strictly));
  choice_ = Rung(rung_);
  choice_.need_s = Need(choice_.codec, m);
  choice_.budget_s = choice_.h * m.step_s;
  return rung_ != before;
}

std::string Describe(const LinkChoice& c) {
  return absl::StrCat(kernels::CodecName(c.codec), " H ", c.h);
}

}  // namespace diloco::worker
