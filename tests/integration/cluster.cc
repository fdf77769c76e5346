#include "tests/integration/cluster.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <iterator>
#include <zmq.hpp>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "schema/transport.h"
#include "tests/util/temp_dir.h"

namespace diloco::testing {

Process::Process(const std::vector<std::string>& argv, const std::string& log) {
  // Everything the child needs is made before fork(): between fork() and exec() a child of a
  // threaded process (a ThrottleProxy, ZeroMQ) may only make async-signal-safe calls.
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // The child reports a failed exec() by writing its errno here; exec() closes the pipe.
  int report[2];
  if (::pipe2(report, O_CLOEXEC) != 0) {
    exec_error_ = absl::ErrnoToStatus(errno, "Process: pipe2");
    reaped_ = true;
    status_ = 127 << 8;
    return;
  }
  pid_ = ::fork();
  if (pid_ == 0) {
    ::close(report[0]);
    int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    }
    ::execv(args[0], args.data());
    const int e = errno;
    if (::write(report[1], &e, sizeof(e)) < 0) {
      // The parent learns of the failure from the exit status alone.
    }
    ::_exit(127);
  }
  ::close(report[1]);
  if (pid_ < 0) {
    exec_error_ = absl::ErrnoToStatus(errno, "Process: fork");
    ::close(report[0]);
    reaped_ = true;
    status_ = 127 << 8;
    return;
  }
  int e = 0;
  ssize_t n;
  while ((n = ::read(report[0], &e, sizeof(e))) < 0 && errno == EINTR) {
  }
  ::close(report[0]);
  if (n == static_cast<ssize_t>(sizeof(e))) {
    exec_error_ = absl::ErrnoToStatus(e, absl::StrCat("Process: cannot execute ", argv[0]));
    std::ofstream(log, std::ios::app) << exec_error_ << "\n";
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

namespace {

std::optional<std::string> FirstLine(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string line;
  if (in && std::getline(in, line) && !line.empty()) return line;
  return std::nullopt;
}

}  // namespace

std::optional<std::string> WaitForLine(const std::filesystem::path& path, absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  while (absl::Now() < end) {
    if (auto line = FirstLine(path)) return line;
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
      server_binary,
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

namespace {

// The last `max_bytes` of a file, or a note that there is none.
std::string TailOf(const std::filesystem::path& path, size_t max_bytes = 2000) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::StrCat("(no ", path.string(), ")");
  const std::string all{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (all.empty()) return "(nothing)";
  return all.size() <= max_bytes ? all : "..." + all.substr(all.size() - max_bytes);
}

// Shard `i`'s endpoint from its port file, once it is written; an error naming the cause when
// the shard exits first or `timeout` passes.
absl::StatusOr<std::string> WaitForPort(Process& shard, int i, const std::filesystem::path& dir,
                                        absl::Duration timeout) {
  const std::filesystem::path port = dir / absl::StrCat("port", i);
  const std::filesystem::path log = dir / absl::StrCat("shard", i, ".log");
  const absl::Time end = absl::Now() + timeout;
  while (true) {
    const bool running = shard.Running();
    if (auto line = FirstLine(port)) return *line;
    if (!running) {
      const std::optional<int> status = shard.Wait(absl::ZeroDuration());
      return absl::UnavailableError(absl::StrCat(
          "shard ", i, " exited with status ", status.value_or(-1), " before writing its port file",
          shard.exec_error().ok() ? "" : absl::StrCat(" (", shard.exec_error().ToString(), ")"),
          "; ", log.string(), " ends: ", TailOf(log)));
    }
    if (absl::Now() >= end) {
      return absl::DeadlineExceededError(
          absl::StrCat("shard ", i, " (pid ", shard.pid(), ") wrote no port file in ",
                       absl::FormatDuration(timeout), "; ", log.string(), " ends: ", TailOf(log)));
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
}

}  // namespace

void LocalShards::StartShards(int n, const std::vector<std::string>& extra,
                              std::vector<std::string> binds) {
  if (binds.empty()) binds.assign(n, "tcp://127.0.0.1:*");
  for (int i = 0; i < n; ++i) shards.push_back(StartShard(i, n, binds[i], extra));
  endpoints.clear();
  std::vector<std::string> found;
  for (int i = 0; i < n; ++i) {
    auto ep = WaitForPort(*shards[shards.size() - n + i], i, dir, absl::Seconds(20));
    if (!ep.ok()) throw ShardsDidNotStart(std::string(ep.status().message()));
    found.push_back(*ep);
  }
  endpoints = std::move(found);
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
