// Multi-process test support: start diloco-server / diloco-worker processes on 127.0.0.1 with
// free ports, read their JSON-lines events and the shards' Stats, stop them by PID.
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "tests/util/jsonl.h"

namespace diloco::testing {

class Process {
 public:
  // Starts `argv` with stdout and stderr appended to `log`. A program that cannot be executed
  // (missing, ETXTBSY while it is being relinked, ...) exits 127 at once; exec_error() and the
  // log then name the cause.
  Process(const std::vector<std::string>& argv, const std::string& log);
  ~Process();  // SIGKILL if still running
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  pid_t pid() const { return pid_; }
  void Signal(int sig);
  // Waits for exit up to `timeout`; returns the exit status or nullopt on timeout.
  std::optional<int> Wait(absl::Duration timeout);
  bool Running();
  // Why fork or exec failed; OK once the program runs.
  const absl::Status& exec_error() const { return exec_error_; }

 private:
  absl::Status exec_error_;
  pid_t pid_ = -1;
  bool reaped_ = false;
  int status_ = 0;
};

// A fresh per-test directory named after the test (tests/util/temp_dir.h's MakeTempDir);
// LocalShards removes its own when the test passes.
std::filesystem::path TestDir();

// Waits until `path` exists and holds a line; returns it.
std::optional<std::string> WaitForLine(const std::filesystem::path& path, absl::Duration timeout);

// One JSON-lines event's numbers by name (tests/util/jsonl.h's NumbersOf), e.g. {"step": 10,
// "loss": 3.2}.
using Event = std::map<std::string, double>;
// The events of a JSON-lines file (ReadJsonLines); with `kind`, only those whose "event" is
// `kind`. Events without numbers are left out.
std::vector<Event> ReadEvents(const std::filesystem::path& jsonl, const std::string& kind = "");

// Asks a shard for its Stats JSON over a fresh DEALER; nullopt if it does not answer in time.
// JsonNumber (tests/util/jsonl.h) reads numbers out of it: "rounds", "versions.3".
std::optional<std::string> ShardStats(const std::string& endpoint, absl::Duration timeout);

// The port of a "tcp://host:port" endpoint (a test failure, and 0, if it names none).
int PortOf(const std::string& endpoint);

std::string ServerBinary();
std::string WorkerBinary();

// The command line of the tests' small worker: the tiny model on one thread, 4 fragments,
// 10 inner steps, batches of 4, one eval batch, progress events every 0.2 s into `jsonl`,
// syncing with `servers` (none: training without sync). Flags appended after these win.
std::vector<std::string> TinyWorkerArgs(int worker_id, const std::vector<std::string>& servers,
                                        const std::filesystem::path& jsonl);

// What StartShards throws when a shard does not start. Its callers index `endpoints` right
// after it, and a fatal gtest assertion inside a helper stops only the helper; an exception
// stops the caller too, and gtest reports it as a failure of the test (in SetUp as well).
class ShardsDidNotStart : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The shards of one test: diloco-server processes on 127.0.0.1 with the settings the
// multi-process tests share (4 fragments, grace cap 1 s, liveness timeout 2 s, a store each);
// `extra` flags come last and so win.
struct LocalShards {
  // Stops the shards; removes `dir` (stores, logs) unless the test failed, when it is kept
  // for a look. At model size a test's stores are gigabytes.
  ~LocalShards();

  std::filesystem::path dir;
  std::string model = "tiny";
  std::string server_binary = ServerBinary();
  std::vector<std::unique_ptr<Process>> shards;
  std::vector<std::string> endpoints;

  std::unique_ptr<Process> StartShard(int i, int n, const std::string& bind,
                                      const std::vector<std::string>& extra = {});
  // Starts n shards and waits for their endpoints; with `binds` empty each picks a free port.
  // Throws ShardsDidNotStart, naming the shard, its exit status and its log's end, when one
  // exits before writing its port file (at once if it could not be executed) or writes none in
  // 20 s; `endpoints` is then empty.
  void StartShards(int n, const std::vector<std::string>& extra = {},
                   std::vector<std::string> binds = {});
  // A number from a shard's Stats ("rounds", "versions.3"), -1 when it does not answer.
  double Stat(int shard, const std::string& key);
};

}  // namespace diloco::testing
