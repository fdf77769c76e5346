// diloco-sim: the discrete-event simulation of a fleet under learner failures
// (benchmarks/sim/fleet_sim.h). One run prints one JSON line;
// --sweep=fleet|scale|recovery|paper|all runs the sweep configurations (benchmarks/sim/sweeps.h)
// and writes their lines to --out as well;
// --quick runs the self-checking quick form and exits 1 when a check fails.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "benchmarks/sim/fleet_sim.h"
#include "benchmarks/sim/sweeps.h"

ABSL_FLAG(std::string, mode, "async", "async, rigid or elastic");
ABSL_FLAG(uint32_t, learners, 8, "N");
ABSL_FLAG(uint32_t, shards, 2, "shards");
ABSL_FLAG(uint32_t, fragments, 8, "fragments");
ABSL_FLAG(uint32_t, inner_steps, 20, "H");
ABSL_FLAG(double, step_time, 0.05, "seconds per inner step");
ABSL_FLAG(double, jitter, 0, "per-learner step time uniform in step_time x [1-j, 1+j]");
ABSL_FLAG(double, mttf, std::numeric_limits<double>::infinity(),
          "per-learner mean time to failure, s");
ABSL_FLAG(double, rate, -1, "fleet failures per round (sets --mttf = N x H x step / rate)");
ABSL_FLAG(double, recovery, 5, "seconds a failed learner is down");
ABSL_FLAG(double, rejoin, 0, "seconds from restart to training, beyond the pull");
ABSL_FLAG(double, detect, 2, "elastic: the worker timeout, s");
ABSL_FLAG(double, sync_grace_cap, 600,
          "rigid and elastic: the longest a round waits for its members, s (inf: for ever; "
          "600: benchmarks/fleet/goodput.py's shards)");
ABSL_FLAG(double, async_grace_cap, 5, "async: the shards' grace cap, s");
ABSL_FLAG(double, async_timeout, 10, "async: the shards' worker timeout, s");
ABSL_FLAG(double, latency, 0, "one-way link latency, s");
ABSL_FLAG(double, bandwidth, 0, "link bytes/s (0: unlimited)");
ABSL_FLAG(double, shard_ingress, 0, "a shard's ingress bytes/s (0: unlimited)");
ABSL_FLAG(uint64_t, parameters, 120000, "model parameters");
ABSL_FLAG(double, warmup, 1, "seconds before the window opens");
ABSL_FLAG(double, window, 30, "window, s");
ABSL_FLAG(uint64_t, seed, 1, "seed of the failure process and the jitter");
ABSL_FLAG(std::string, schedule, "",
          "file of 'learner seconds' lines: failure times after the window opens, replacing the "
          "seeded process");
ABSL_FLAG(std::string, sweep, "", "fleet, scale, recovery, paper or all");
ABSL_FLAG(std::string, out, "", "with --sweep: also write the lines here");
ABSL_FLAG(bool, quick, false, "the quick form: small runs checked against their expectations");

namespace diloco::sim {
namespace {

int Fail(const std::string& why) {
  std::fprintf(stderr, "diloco-sim: %s\n", why.c_str());
  return 2;
}

int Main() {
  if (absl::GetFlag(FLAGS_quick)) {
    const bool ok = QuickCheck();
    std::printf("%s\n", ok ? "quick: ok" : "quick: FAILED");
    return ok ? 0 : 1;
  }
  if (const std::string s = absl::GetFlag(FLAGS_sweep); !s.empty()) {
    std::vector<FleetConfig> runs;
    if (s == "fleet" || s == "all") runs = FleetSweep();
    if (s == "scale" || s == "all")
      for (FleetConfig& c : ScaleSweep()) runs.push_back(std::move(c));
    if (s == "recovery" || s == "all")
      for (FleetConfig& c : RecoverySweep()) runs.push_back(std::move(c));
    if (s == "paper" || s == "all")
      for (FleetConfig& c : PaperSweep()) runs.push_back(std::move(c));
    if (runs.empty()) return Fail("--sweep: expected fleet, scale, recovery, paper or all");
    std::ofstream out;
    if (const std::string path = absl::GetFlag(FLAGS_out); !path.empty()) {
      out.open(path);
      if (!out) return Fail("cannot write --out " + path);
    }
    for (const FleetConfig& c : runs) {
      const std::string line = FleetSim(c).Run().JsonLine(c);
      std::printf("%s\n", line.c_str());
      std::fflush(stdout);
      if (out.is_open()) out << line << "\n" << std::flush;
    }
    return 0;
  }
  FleetConfig c;
  auto mode = ParseMode(absl::GetFlag(FLAGS_mode));
  if (!mode.ok()) return Fail(std::string(mode.status().message()));
  c.mode = *mode;
  c.learners = absl::GetFlag(FLAGS_learners);
  c.shards = absl::GetFlag(FLAGS_shards);
  c.fragments = absl::GetFlag(FLAGS_fragments);
  c.inner_steps = absl::GetFlag(FLAGS_inner_steps);
  c.step_time_s = absl::GetFlag(FLAGS_step_time);
  c.jitter = absl::GetFlag(FLAGS_jitter);
  c.mttf_s = absl::GetFlag(FLAGS_mttf);
  if (absl::GetFlag(FLAGS_rate) >= 0) c.mttf_s = MttfForRate(c, absl::GetFlag(FLAGS_rate));
  c.recovery_s = absl::GetFlag(FLAGS_recovery);
  c.rejoin_s = absl::GetFlag(FLAGS_rejoin);
  c.detect_s = absl::GetFlag(FLAGS_detect);
  c.sync_grace_cap_s = absl::GetFlag(FLAGS_sync_grace_cap);
  c.async_grace_cap_s = absl::GetFlag(FLAGS_async_grace_cap);
  c.async_timeout_s = absl::GetFlag(FLAGS_async_timeout);
  c.latency_s = absl::GetFlag(FLAGS_latency);
  c.bandwidth_Bps = absl::GetFlag(FLAGS_bandwidth);
  c.shard_ingress_Bps = absl::GetFlag(FLAGS_shard_ingress);
  c.parameters = absl::GetFlag(FLAGS_parameters);
  c.warmup_s = absl::GetFlag(FLAGS_warmup);
  c.window_s = absl::GetFlag(FLAGS_window);
  c.seed = absl::GetFlag(FLAGS_seed);
  if (c.learners == 0 || c.shards == 0 || c.fragments == 0 || c.fragments > 255 ||
      c.inner_steps == 0 || !(c.step_time_s > 0) || !(c.window_s > 0) || c.jitter < 0 ||
      c.jitter >= 1)
    return Fail(
        "learners, shards, fragments (at most 255), H, step time, window must be "
        "positive and jitter in [0, 1)");
  if (!(c.mttf_s > 0) || !(c.recovery_s >= 0) || !(c.rejoin_s >= 0) || !(c.detect_s >= 0) ||
      !(c.latency_s >= 0) || !(c.bandwidth_Bps >= 0) || !(c.shard_ingress_Bps >= 0) ||
      !(c.warmup_s >= 0) || !(c.sync_grace_cap_s > 0) || !(c.async_grace_cap_s >= 0) ||
      !(c.async_timeout_s > 0))
    return Fail(
        "mttf, the sync grace cap and the async timeout must be positive; recovery, rejoin, "
        "detect, latency, bandwidth, shard_ingress, warmup and the async grace cap must not be "
        "negative");
  if (const std::string path = absl::GetFlag(FLAGS_schedule); !path.empty()) {
    std::ifstream in(path);
    if (!in) return Fail("cannot read --schedule " + path);
    c.schedule.assign(c.learners, {});
    uint32_t l;
    double t;
    std::string line;
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      std::istringstream ls(line);
      if (!(ls >> l >> t) || l >= c.learners || t < 0)
        return Fail("--schedule: bad line '" + line + "'");
      c.schedule[l].push_back(t);
    }
  }
  std::printf("%s\n", FleetSim(c).Run().JsonLine(c).c_str());
  return 0;
}

}  // namespace
}  // namespace diloco::sim

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("diloco-sim: a fleet under learner failures, simulated");
  absl::ParseCommandLine(argc, argv);
  return diloco::sim::Main();
}
