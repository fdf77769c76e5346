#include "tests/integration/cluster.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <zmq.hpp>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "schema/transport.h"
#include "tests/util/temp_dir.h"

namespace diloco::testing {

Process::Process(const std::vector<std::string>& argv, const std::string& log) {
  pid_ = ::fork();
  if (pid_ == 0) {
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
}

Process::~Process() {
  if (Running()) {
    Signal(SIGKILL);
    Wait(absl::Seconds(10));
  }
}

void Process::Signal(int sig) {
  if (pid_ > 0 && !reaped_) ::kill(pid_, sig);
}

bool Process::Running() {
  if (pid_ <= 0 || reaped_) return false;
  int st = 0;
  pid_t r = ::waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    reaped_ = true;
    status_ = st;
    return false;
  }
  return true;
}

std::optional<int> Process::Wait(absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  while (Running()) {
    if (absl::Now() >= end) return std::nullopt;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
}

std::filesystem::path TestDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  return MakeTempDir(absl::StrCat("diloco_", info->test_suite_name(), "_", info->name(), "_"));
}

std::optional<std::string> WaitForLine(const std::filesystem::path& path, absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  while (absl::Now() < end) {
    std::ifstream in(path);
    std::string line;
    if (in && std::getline(in, line) && !line.empty()) return line;
    absl::SleepFor(absl::Milliseconds(20));
  }
  return std::nullopt;
}

std::vector<Event> ReadEvents(const std::filesystem::path& jsonl, const std::string& kind) {
  std::vector<Event> events;
  for (const Json& line : ReadJsonLines(jsonl)) {
    if (!kind.empty() && EventName(line) != kind) continue;
    Event e = NumbersOf(line);
    if (!e.empty()) events.push_back(std::move(e));
  }
  return events;
}

std::optional<std::string> ShardStats(const std::string& endpoint, absl::Duration timeout) {
  auto s = wire::RequestStats(endpoint, timeout);
  if (!s.ok()) return std::nullopt;
  return *s;
}

LocalShards::~LocalShards() {
  shards.clear();
  if (dir.empty() || ::testing::Test::HasFailure()) return;
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

std::unique_ptr<Process> LocalShards::StartShard(int i, int n, const std::string& bind,
                                                 const std::vector<std::string>& extra) {
  std::filesystem::remove(dir / absl::StrCat("port", i));
  std::vector<std::string> argv = {
      ServerBinary(),
      "--bind=" + bind,
      absl::StrCat("--port_file=", (dir / absl::StrCat("port", i)).string()),
      absl::StrCat("--shard=", i),
      absl::StrCat("--shards=", n),
      "--fragments=4",
      "--model=" + model,
      absl::StrCat("--store=", (dir / absl::StrCat("store", i)).string()),
      "--grace_cap=1s",
      "--worker_timeout=2s",
      "--progress_interval=1000s"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  return std::make_unique<Process>(argv, (dir / absl::StrCat("shard", i, ".log")).string());
}

void LocalShards::StartShards(int n, const std::vector<std::string>& extra,
                              std::vector<std::string> binds) {
  if (binds.empty()) binds.assign(n, "tcp://127.0.0.1:*");
  for (int i = 0; i < n; ++i) shards.push_back(StartShard(i, n, binds[i], extra));
  endpoints.clear();
  for (int i = 0; i < n; ++i) {
    auto ep = WaitForLine(dir / absl::StrCat("port", i), absl::Seconds(20));
    ASSERT_TRUE(ep.has_value()) << "shard " << i << " did not start";
    endpoints.push_back(*ep);
  }
}

double LocalShards::Stat(int shard, const std::string& key) {
  auto s = ShardStats(endpoints[shard], absl::Seconds(5));
  EXPECT_TRUE(s.has_value()) << "shard " << shard << " did not answer Stats";
  if (!s) return -1;
  auto v = JsonNumber(*s, key);
  return v ? *v : -1;
}

std::string ServerBinary() { return DILOCO_SERVER_BINARY; }
std::string WorkerBinary() { return DILOCO_WORKER_BINARY; }

int PortOf(const std::string& endpoint) {
  int port = 0;
  const size_t colon = endpoint.rfind(':');
  EXPECT_TRUE(colon != std::string::npos && absl::SimpleAtoi(endpoint.substr(colon + 1), &port))
      << endpoint;
  return port;
}

std::vector<std::string> TinyWorkerArgs(int worker_id, const std::vector<std::string>& servers,
                                        const std::filesystem::path& jsonl) {
  std::vector<std::string> argv = {WorkerBinary(),
                                   absl::StrCat("--worker_id=", worker_id),
                                   "--fragments=4",
                                   "--model=tiny",
                                   "--inner_steps=10",
                                   "--batch=4",
                                   "--threads=1",
                                   "--eval_batches=1",
                                   "--progress_interval=0.2s",
                                   "--metrics_jsonl=" + jsonl.string()};
  if (!servers.empty()) argv.push_back("--servers=" + absl::StrJoin(servers, ","));
  return argv;
}

}  // namespace diloco::testing
