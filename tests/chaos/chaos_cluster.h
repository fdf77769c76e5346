// The cluster a chaos run abuses: diloco-server shards on 127.0.0.1 (shards 0 and 1 per-round,
// the last one periodic; shard 1's store on a small tmpfs where one can be mounted, so its disk
// can be filled), each behind a FaultProxy, and diloco-worker processes that reach the shards
// only through the proxies. Every process writes its logs and JSON lines under `dir`; each run
// of a worker (it is restarted after a kill) gets its own events file.
#pragma once

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "tests/chaos/fault_proxy.h"
#include "tests/integration/cluster.h"
#include "tests/util/tmpfs.h"

namespace diloco::testing {

struct ChaosConfig {
  std::filesystem::path dir;
  std::string server_binary, worker_binary, ctl_binary;
  int shards = 3, workers = 6, fragments = 6;
  std::string model = "tiny";
  uint64_t seed = 1;
  int inner_steps = 25;  // H: the workers' --inner_steps
  int carry_max = 8;     // the workers' --carry_max: a push claims at most carry_max x H steps
  uint64_t max_push_steps() const { return static_cast<uint64_t>(carry_max) * inner_steps; }
};

class ChaosCluster {
 public:
  explicit ChaosCluster(ChaosConfig c);
  ~ChaosCluster();  // SIGKILLs what is still running

  // Shards (each on a fixed port from its first start on), proxies, then workers.
  absl::Status Start();

  const ChaosConfig& config() const { return c_; }
  bool per_round(int s) const { return s + 1 < c_.shards; }
  bool has_tmpfs() const { return tmpfs_ && tmpfs_->mounted(); }
  std::string tmpfs_error() const { return tmpfs_ ? tmpfs_->error() : "no tmpfs asked for"; }
  int tmpfs_shard() const { return 1; }
  const std::filesystem::path& tmpfs_dir() const { return tmpfs_->dir(); }

  Process& shard(int s) { return *shards_[s]; }
  Process& worker(int w) { return *workers_[w]; }
  FaultProxy& proxy(int s) { return *proxies_[s]; }
  const std::string& shard_endpoint(int s) const { return endpoints_[s]; }

  // (Re)starts shard `s` on its port and store; `extra` flags come last. Waits for its port
  // file; Unavailable when it does not come up in `timeout`.
  absl::Status StartShard(int s, const std::vector<std::string>& extra = {},
                          absl::Duration timeout = absl::Seconds(30));
  // The two halves of StartShard: LaunchShard returns at once (a restart, which binds the port
  // of the shard's first start, so the proxy reconnects without being told); AwaitShard waits
  // for the port file the launched shard writes once it reads its socket.
  void LaunchShard(int s, const std::vector<std::string>& extra = {});
  absl::Status AwaitShard(int s, absl::Duration timeout = absl::Seconds(30));
  // (Re)starts worker `w` with a new events file (worker<w>.<run>.jsonl).
  void StartWorker(int w);
  int worker_runs(int w) const { return runs_[w]; }
  std::filesystem::path worker_events(int w, int run) const;
  std::filesystem::path store(int s) const;
  std::filesystem::path audit(int s) const;
  std::filesystem::path log(const std::string& name) const { return c_.dir / (name + ".log"); }

  // The last lines of a log, for a report.
  std::string Tail(const std::filesystem::path& log, int lines = 5) const;

 private:
  std::vector<std::string> ShardArgv(int s, const std::string& bind) const;

  ChaosConfig c_;
  std::unique_ptr<Tmpfs> tmpfs_;
  std::vector<std::unique_ptr<Process>> shards_, workers_;
  std::vector<std::unique_ptr<FaultProxy>> proxies_;
  std::vector<std::string> endpoints_;
  std::vector<int> runs_;
};

}  // namespace diloco::testing
