#include "benchmarks/sim/sim_result.h"

#include <cmath>

#include "absl/strings/str_format.h"

namespace diloco::sim {
namespace {

std::string Num(double x) {
  if (!std::isfinite(x)) return "null";  // JSON has no infinity: M = infinity is "no failures"
  return absl::StrFormat("%.10g", x);
}

}  // namespace

std::string SimResult::JsonLine(const FleetConfig& c) const {
  const double lost = pushes ? static_cast<double>(lost_pushes) / pushes : 0;
  return absl::StrFormat(
      "{\"mode\": \"%s\", \"N\": %u, \"M\": %s, \"R\": %s, \"goodput\": %s, \"tokens_rel\": %s, "
      "\"pushes\": %u, \"lost_pushes\": %u, \"lost_push_fraction\": %s, \"rounds\": %s, "
      "\"round_share\": %s, \"failures\": %u, \"failures_per_round\": %s, \"H\": %u, "
      "\"step_time_s\": %s, \"fragments\": %u, \"shards\": %u, \"detect_s\": %s, "
      "\"rejoin_s\": %s, \"latency_s\": %s, \"jitter\": %s, \"window_s\": %s, \"seed\": %u, "
      "\"replayed_schedule\": %s, \"events\": %u}",
      ModeName(mode), learners, Num(mttf_s), Num(recovery_s), Num(goodput), Num(tokens_rel), pushes,
      lost_pushes, Num(lost), Num(rounds), Num(round_share), failures, Num(failures_per_round),
      c.inner_steps, Num(c.step_time_s), c.fragments, c.shards, Num(c.detect_s), Num(c.rejoin_s),
      Num(c.latency_s), Num(c.jitter), Num(window_s), c.seed, c.schedule.empty() ? "false" : "true",
      events);
}

}  // namespace diloco::sim
