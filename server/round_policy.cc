#include "server/round_policy.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace diloco::server {

absl::StatusOr<WeightScheme> ParseWeightScheme(const std::string& s) {
  if (s == "tokens2_over_steps" || s == "default") return WeightScheme::kTokensSqOverSteps;
  if (s == "tokens") return WeightScheme::kTokens;
  if (s == "uniform") return WeightScheme::kUniform;
  return absl::InvalidArgumentError(
      absl::StrCat("weights '", s, "': expected tokens2_over_steps, tokens or uniform"));
}

double PushWeight(WeightScheme scheme, uint64_t tokens, uint32_t steps, uint64_t staleness,
                  double staleness_alpha) {
  double w = 1.0;
  switch (scheme) {
    case WeightScheme::kTokensSqOverSteps:
      w = static_cast<double>(tokens) * static_cast<double>(tokens) / std::max<uint32_t>(steps, 1);
      break;
    case WeightScheme::kTokens:
      w = static_cast<double>(tokens);
      break;
    case WeightScheme::kUniform:
      break;
  }
  if (staleness_alpha > 0) w *= std::pow(1.0 + static_cast<double>(staleness), -staleness_alpha);
  return w;
}

uint32_t QuorumAfterLeaves(uint32_t quorum, uint32_t known, uint32_t left) {
  const uint32_t fleet = std::max(quorum, known);
  const uint32_t staying = fleet > left ? fleet - left : 0;
  return std::max<uint32_t>(1, std::min(quorum, staying));
}

absl::Duration GraceWindow(const RoundPolicy& p, const RoundTimings& t) {
  const double cycle = t.cycle_s > 0 ? t.cycle_s : t.inner_steps * t.step_time_s;
  const double s = p.gamma * (cycle - t.time_to_quorum_s - t.sync_time_s);
  absl::Duration g = absl::Seconds(std::isfinite(s) ? s : 0.0);
  return std::clamp(g, std::min(p.min_grace, p.grace_cap), p.grace_cap);
}

bool ShouldClose(const RoundPolicy& p, absl::Duration grace, const OpenRound& r, absl::Time now) {
  if (r.pushes == 0) return false;
  if (now - r.opened >= p.grace_cap) return true;
  if (r.pushes < p.quorum) return p.elastic && r.live_workers_missing == 0;  // none else live
  return r.live_workers_missing == 0 || now - r.quorum_reached >= grace;
}

absl::Time CloseDeadline(const RoundPolicy& p, absl::Duration grace, const OpenRound& r) {
  if (r.pushes == 0) return absl::InfiniteFuture();
  absl::Time t = r.opened + p.grace_cap;
  if (r.pushes >= p.quorum) t = std::min(t, r.quorum_reached + grace);
  return t;
}

}  // namespace diloco::server
