#include "tests/chaos/chaos_cluster.h"

#include <deque>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace diloco::testing {

ChaosCluster::ChaosCluster(ChaosConfig c) : c_(std::move(c)) {
  shards_.resize(c_.shards);
  workers_.resize(c_.workers);
  endpoints_.resize(c_.shards);
  runs_.assign(c_.workers, 0);
}

ChaosCluster::~ChaosCluster() {
  workers_.clear();  // Process's destructor SIGKILLs a running process
  shards_.clear();
  proxies_.clear();
}

std::filesystem::path ChaosCluster::store(int s) const {
  if (s == tmpfs_shard() && tmpfs_ && tmpfs_->mounted()) return tmpfs_->dir() / "store";
  return c_.dir / absl::StrCat("store", s);
}

std::filesystem::path ChaosCluster::audit(int s) const {
  return c_.dir / absl::StrCat("audit", s, ".jsonl");
}

std::filesystem::path ChaosCluster::worker_events(int w, int run) const {
  return c_.dir / absl::StrCat("worker", w, ".", run, ".jsonl");
}

std::vector<std::string> ChaosCluster::ShardArgv(int s, const std::string& bind) const {
  return {c_.server_binary,
          "--bind=" + bind,
          absl::StrCat("--port_file=", (c_.dir / absl::StrCat("port", s)).string()),
          absl::StrCat("--shard=", s),
          absl::StrCat("--shards=", c_.shards),
          absl::StrCat("--fragments=", c_.fragments),
          "--model=" + c_.model,
          "--store=" + store(s).string(),
          per_round(s) ? "--durability=per-round" : "--durability=periodic",
          "--checkpoint_every_rounds=10",
          "--checkpoint_interval=3s",
          "--grace_cap=1s",
          "--worker_timeout=3s",
          "--progress_interval=1000s",
          "--audit_jsonl=" + audit(s).string(),
          absl::StrCat("--metrics_jsonl=", (c_.dir / absl::StrCat("shard", s, ".jsonl")).string())};
}

absl::Status ChaosCluster::StartShard(int s, const std::vector<std::string>& extra,
                                      absl::Duration timeout) {
  LaunchShard(s, extra);
  return AwaitShard(s, timeout);
}

void ChaosCluster::LaunchShard(int s, const std::vector<std::string>& extra) {
  std::filesystem::remove(c_.dir / absl::StrCat("port", s));
  // Its first start picks a free port; every restart binds that one, which the proxy's
  // connections reconnect to.
  auto argv = ShardArgv(s, endpoints_[s].empty() ? "tcp://127.0.0.1:*" : endpoints_[s]);
  argv.insert(argv.end(), extra.begin(), extra.end());
  shards_[s] = std::make_unique<Process>(argv, log(absl::StrCat("shard", s)).string());
}

absl::Status ChaosCluster::AwaitShard(int s, absl::Duration timeout) {
  auto ep = WaitForLine(c_.dir / absl::StrCat("port", s), timeout);
  if (!ep)
    return absl::UnavailableError(absl::StrCat("shard ", s, " did not start in ",
                                               absl::FormatDuration(timeout), ": ",
                                               Tail(log(absl::StrCat("shard", s)))));
  endpoints_[s] = *ep;
  return absl::OkStatus();
}

void ChaosCluster::StartWorker(int w) {
  std::vector<std::string> servers;
  for (const auto& p : proxies_) servers.push_back(p->endpoint());
  const int run = runs_[w]++;
  const std::vector<std::string> argv = {
      c_.worker_binary,
      "--servers=" + absl::StrJoin(servers, ","),
      absl::StrCat("--worker_id=", w),
      "--model=" + c_.model,
      absl::StrCat("--fragments=", c_.fragments),
      "--num_workers=1",  // every worker samples the whole mixture, with a seed of its own
      absl::StrCat("--seed=", 100 + 7 * w + 1000 * run),
      "--init_seed=1234",
      "--lr=3e-3",
      absl::StrCat("--inner_steps=", c_.inner_steps),
      absl::StrCat("--carry_max=", c_.carry_max),
      "--threads=1",
      "--step_delay=5ms",  // leaves the two cores some room for shards and restarts
      "--log_sync_events",
      "--progress_interval=1s",
      "--eval_batches=16",
      "--metrics_jsonl=" + worker_events(w, run).string()};
  workers_[w] = std::make_unique<Process>(argv, log(absl::StrCat("worker", w)).string());
}

absl::Status ChaosCluster::Start() {
  std::filesystem::create_directories(c_.dir);
  tmpfs_ = std::make_unique<Tmpfs>(c_.dir / "tmpfs", "8m");
  for (int s = 0; s < c_.shards; ++s)
    if (auto st = StartShard(s); !st.ok()) return st;
  for (int s = 0; s < c_.shards; ++s) {
    auto p = FaultProxy::Start(endpoints_[s], c_.seed * 1000 + s);
    if (!p.ok()) return p.status();
    proxies_.push_back(*std::move(p));
  }
  for (int w = 0; w < c_.workers; ++w) StartWorker(w);
  return absl::OkStatus();
}

std::string ChaosCluster::Tail(const std::filesystem::path& log, int lines) const {
  std::ifstream in(log);
  std::deque<std::string> last;
  std::string line;
  while (std::getline(in, line)) {
    last.push_back(line);
    if (static_cast<int>(last.size()) > lines) last.pop_front();
  }
  return absl::StrJoin(last, " | ");
}

}  // namespace diloco::testing
