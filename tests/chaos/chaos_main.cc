// diloco-chaos: one chaos run (tests/chaos/chaos_run.h) of a local cluster, 3 shards behind
// fault-injecting proxies and 6 workers on 127.0.0.1, for --duration of faults; prints what was
// injected and survived and every invariant violation; exit status 0 only with none.
//   diloco-chaos --duration=3m --seed=1           (the short mode deploy/test.sh runs)
//   diloco-chaos --duration=1h --seed=7 --keep    (the long mode, benchmarks/chaos/RESULTS.md)
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "tests/chaos/chaos_run.h"

ABSL_FLAG(absl::Duration, duration, absl::Minutes(3), "how long faults are injected");
ABSL_FLAG(uint64_t, seed, 1, "seed of the fault schedule and of the proxies' faults");
ABSL_FLAG(absl::Duration, fault_interval, absl::Seconds(3),
          "mean time between process, link and disk faults");
ABSL_FLAG(std::string, dir, "", "working directory (default: a new one under $TMPDIR)");
ABSL_FLAG(bool, keep, false, "keep the working directory (logs, stores) after a clean run");
ABSL_FLAG(std::string, report, "", "also write the report as JSON here");
ABSL_FLAG(std::string, server, DILOCO_SERVER_BINARY, "diloco-server binary");
ABSL_FLAG(std::string, worker, DILOCO_WORKER_BINARY, "diloco-worker binary");
ABSL_FLAG(std::string, ctl, DILOCO_CTL_BINARY, "diloco-ctl binary");

namespace {
// SIGINT / SIGTERM end the run early and cleanly (the cluster's processes are stopped and the
// tmpfs unmounted) instead of leaving nine processes running; a second signal kills at once.
std::atomic<bool> g_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free);
extern "C" void OnSignal(int sig) {
  g_interrupted.store(true);
  std::signal(sig, SIG_DFL);
}
}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("diloco-chaos [--duration=3m] [--seed=N] [--keep]");
  absl::ParseCommandLine(argc, argv);
  using namespace diloco::testing;
  ChaosOptions o;
  o.interrupted = &g_interrupted;
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  o.duration = absl::GetFlag(FLAGS_duration);
  o.mean_fault_interval = absl::GetFlag(FLAGS_fault_interval);
  if (o.duration <= absl::ZeroDuration() || o.mean_fault_interval <= absl::ZeroDuration()) {
    std::fprintf(stderr, "diloco-chaos: --duration and --fault_interval must be positive\n");
    return 2;
  }
  ChaosConfig& c = o.cluster;
  c.seed = absl::GetFlag(FLAGS_seed);
  c.server_binary = absl::GetFlag(FLAGS_server);
  c.worker_binary = absl::GetFlag(FLAGS_worker);
  c.ctl_binary = absl::GetFlag(FLAGS_ctl);
  c.dir = absl::GetFlag(FLAGS_dir);
  if (c.dir.empty())
    c.dir = std::filesystem::temp_directory_path() /
            absl::StrCat("diloco_chaos_", c.seed, "_", ::getpid());
  std::filesystem::remove_all(c.dir);
  std::fprintf(stderr, "diloco-chaos: %s of faults, seed %lu, in %s\n",
               absl::FormatDuration(o.duration).c_str(), static_cast<unsigned long>(c.seed),
               c.dir.c_str());
  const ChaosReport r = RunChaos(o);
  std::printf("%s", r.Text().c_str());
  if (const auto path = absl::GetFlag(FLAGS_report); !path.empty())
    std::ofstream(path) << r.Json() << "\n";
  if (r.violations.empty() && !absl::GetFlag(FLAGS_keep)) {
    std::error_code ec;
    std::filesystem::remove_all(c.dir, ec);
  } else {
    std::printf("logs and stores kept in %s\n", c.dir.c_str());
  }
  if (g_interrupted.load()) return 130;
  return r.violations.empty() ? 0 : 1;
}
