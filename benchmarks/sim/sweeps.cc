#include "benchmarks/sim/sweeps.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "absl/strings/str_format.h"
#include "benchmarks/sim/fleet_sim.h"

namespace diloco::sim {
namespace {

constexpr Mode kModes[] = {Mode::kAsync, Mode::kRigid, Mode::kElastic};
constexpr double kYear = 365.25 * 86400;

// The scale sweep's fleet of N learners in mode m, before its failure process is set.
FleetConfig ScaleFleet(uint32_t n, Mode m) {
  FleetConfig c;
  c.mode = m;
  c.learners = n;
  c.shards = 1;
  c.fragments = 1;
  c.inner_steps = 100;
  c.step_time_s = 1;
  c.jitter = 0.02;
  c.latency_s = 0.05;
  c.recovery_s = 600;
  c.detect_s = 10;
  c.async_timeout_s = 30;
  c.async_grace_cap_s = 50;  // half a round, as 5 s is at goodput.py's 1 s rounds x 5
  // Synchronous rounds wait for their members however long: goodput.py's 600 s cap stands for
  // that at its 5 s recovery, but here a recovery of 600 s and more would run into it, and a
  // rigid round would close without its failed member (a floor of about a round over the cap).
  c.sync_grace_cap_s = std::numeric_limits<double>::infinity();
  c.warmup_s = 2 * c.inner_steps * c.step_time_s;
  return c;
}

}  // namespace

double MttfForRate(const FleetConfig& c, double rate) {
  if (rate <= 0) return std::numeric_limits<double>::infinity();
  return c.learners * c.inner_steps * c.step_time_s / rate;
}

std::vector<FleetConfig> FleetSweep() {
  std::vector<FleetConfig> out;
  for (uint32_t n : {8u, 16u, 32u})
    for (double rate : {0.0, 0.1, 0.3, 1.0, 3.0})
      for (Mode m : kModes) {
        FleetConfig c;  // goodput.py's defaults
        c.mode = m;
        c.learners = n;
        c.mttf_s = MttfForRate(c, rate);
        out.push_back(c);
      }
  return out;
}

std::vector<FleetConfig> ScaleSweep() {
  std::vector<FleetConfig> out;
  for (uint32_t n : {1'000u, 10'000u, 100'000u, 1'000'000u})
    for (double years : {1.0, 0.1})
      for (Mode m : kModes) {
        FleetConfig c = ScaleFleet(n, m);
        c.mttf_s = years * kYear;
        // About ten fleet failures per run, at least an hour.
        c.window_s = std::max(3600.0, 10 * c.mttf_s / n);
        out.push_back(c);
      }
  return out;
}

std::vector<FleetConfig> RecoverySweep() {
  std::vector<FleetConfig> out;
  for (double rate : {1.0, 3.0})
    for (double rounds : {1.0, 2.0, 4.0, 8.0, 16.0, 32.0})
      for (Mode m : kModes) {
        FleetConfig c = ScaleFleet(1'000, m);
        const double round_s = c.inner_steps * c.step_time_s;
        c.recovery_s = rounds * round_s;
        c.mttf_s = MttfForRate(c, rate);
        c.window_s = 100 * round_s;  // about 100 to 300 fleet failures
        out.push_back(c);
      }
  return out;
}

std::vector<FleetConfig> PaperSweep() {
  struct Variant {
    uint32_t chips_per_learner;
    double round_s;
  };
  std::vector<FleetConfig> out;
  for (Variant v : {Variant{2048, 30}, Variant{4096, 30}, Variant{2048, 100}})
    for (Mode m : kModes) {
      FleetConfig c = ScaleFleet(kPaperChips / v.chips_per_learner, m);
      c.step_time_s = v.round_s / c.inner_steps;
      c.mttf_s = kChipMttfYears * kYear / v.chips_per_learner;
      c.recovery_s = kTorchftRecoveryS;
      c.async_grace_cap_s = v.round_s / 2;
      c.warmup_s = 2 * v.round_s;
      c.window_s = 10 * 3600;
      out.push_back(c);
    }
  return out;
}

bool QuickCheck() {
  bool ok = true;
  auto fail = [&](const std::string& what) {
    std::printf("FAIL: %s\n", what.c_str());
    ok = false;
  };
  auto run = [](const FleetConfig& c) {
    SimResult r = FleetSim(c).Run();
    std::printf("%s\n", r.JsonLine(c).c_str());
    return r;
  };
  for (uint32_t n : {8u, 16u}) {
    double g[3] = {};
    for (Mode m : kModes) {
      FleetConfig c;
      c.mode = m;
      c.learners = n;
      const SimResult none = run(c);
      if (std::abs(none.goodput - 1) > 1e-6)
        fail(absl::StrFormat("%s N=%u: goodput %.9f without failures, expected 1", ModeName(m), n,
                             none.goodput));
      c.mttf_s = MttfForRate(c, 1.0);
      const SimResult r = run(c);
      if (r.failures == 0) fail(absl::StrFormat("%s N=%u: no failure happened", ModeName(m), n));
      if (!(r.goodput >= 0 && r.goodput <= 1))
        fail(absl::StrFormat("%s N=%u: goodput %.4f outside [0, 1]", ModeName(m), n, r.goodput));
      g[static_cast<int>(m)] = r.goodput;
      if (m == Mode::kElastic && run(c).JsonLine(c) != r.JsonLine(c))
        fail(absl::StrFormat("%s N=%u: the same run twice differs", ModeName(m), n));
    }
    if (!(g[0] >= g[2] && g[2] >= g[1]))
      fail(absl::StrFormat("N=%u: goodput async %.4f, elastic %.4f, rigid %.4f: not in order", n,
                           g[0], g[2], g[1]));
  }
  FleetConfig big;
  big.learners = 10'000;
  big.fragments = 1;
  big.shards = 1;
  big.window_s = 20;
  big.mttf_s = MttfForRate(big, 1.0);
  const SimResult r = run(big);
  if (!(r.goodput > 0 && r.goodput <= 1) || r.failures == 0)
    fail(absl::StrFormat("async N=10000: goodput %.4f with %u failures", r.goodput, r.failures));
  return ok;
}

}  // namespace diloco::sim
