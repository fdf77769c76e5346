// Bad flags and unusable inputs at start: diloco-server and diloco-worker exit with status 2 and
// a message naming the problem, before anything lasting happens (no shard store is created).
// And the example flag files that the deploy recipes use (deploy/flags) are accepted.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "tests/integration/cluster.h"

namespace diloco::testing {
namespace {

struct Case {
  std::string flags;    // space-separated
  std::string message;  // part of the error line
};

// Runs `binary` with `flags`; returns its exit status (-1: still running after 20 s) and log.
std::pair<int, std::string> RunToExit(const std::string& binary,
                                      const std::vector<std::string>& flags,
                                      const std::filesystem::path& log) {
  std::vector<std::string> argv = {binary};
  argv.insert(argv.end(), flags.begin(), flags.end());
  std::filesystem::remove(log);
  Process p(argv, log.string());
  const auto status = p.Wait(absl::Seconds(20));
  std::ifstream in(log);
  return {status.value_or(-1), std::string(std::istreambuf_iterator<char>(in), {})};
}

TEST(FlagsTest, WorkerRefusesBadFlagsWithAMessage) {
  const auto dir = TestDir();
  const std::vector<Case> cases = {
      {"--device=tpu", "--device=tpu: expected cpu or cuda"},
      // A CPU-only build says it has no CUDA backend; a CUDA build counts the GPUs it can use.
      {"--device=cuda --gpus=64", "--device=cuda"},
      {"--device=cuda --gpus=0", "--gpus must be at least 1"},
      {"--codec=int9", "unknown codec 'int9'"},
      {"--model=L=0", "model spec 'L=0'"},
      {"--heartbeat=5s --shard_timeout=1s --servers=tcp://127.0.0.1:9",
       "--heartbeat must be positive and shorter than --shard_timeout"},
      {"--data=bin:/nonexistent/tokens.bin", "/nonexistent/tokens.bin"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> flags = absl::StrSplit(c.flags, ' ');
    flags.insert(flags.begin(), {"--model=tiny", "--steps=1"});
    if (c.flags.rfind("--model=", 0) == 0) flags.erase(flags.begin());
    const auto [status, log] = RunToExit(WorkerBinary(), flags, dir / "worker.log");
    EXPECT_EQ(status, 2) << c.flags << "\n" << log;
    EXPECT_NE(log.find(c.message), std::string::npos) << c.flags << "\n" << log;
  }
}

TEST(FlagsTest, ServerRefusesBadInputAndCreatesNoStore) {
  const auto dir = TestDir();
  const std::vector<Case> cases = {
      {"--model=bogus", "model spec 'bogus'"},
      {"--shards=2 --shard=5", "shard 5 out of range for 2 shards"},
      {"--fragments=0", "fragments and shards must be positive"},
      {"--durability=sometimes", "--durability must be periodic or per-round"},
      {"--outer=adam", "--outer must be rounds or delayed-nesterov"},
      {"--merge=median", "--merge must be mean or rda"},
      {"--bind=tcp://999.1.1.1:1", "cannot bind tcp://999.1.1.1:1"},
      {"--metrics_jsonl=/nonexistent/dir/x.jsonl", "/nonexistent/dir/x.jsonl"},
      {"--curve_secret_key_file=/nonexistent/key", "/nonexistent/key"},
      {"--curve_authorized_keys=/nonexistent/keys", "needs --curve_secret_key_file"},
  };
  int i = 0;
  for (const Case& c : cases) {
    const auto store = dir / ("store" + std::to_string(i++));
    std::vector<std::string> flags = absl::StrSplit(c.flags, ' ');
    flags.insert(flags.begin(),
                 {"--model=tiny", "--bind=tcp://127.0.0.1:*", "--store=" + store.string()});
    const auto [status, log] = RunToExit(ServerBinary(), flags, dir / "server.log");
    EXPECT_EQ(status, 2) << c.flags << "\n" << log;
    EXPECT_NE(log.find(c.message), std::string::npos) << c.flags << "\n" << log;
    EXPECT_FALSE(std::filesystem::exists(store)) << c.flags << ": a refused start left a store";
  }
}

TEST(FlagsTest, DeployFlagFilesAreAccepted) {
  const auto dir = TestDir();
  const std::string flags = std::string(DILOCO_SOURCE_DIR) + "/deploy/flags/";
  Process shard({ServerBinary(), "--flagfile=" + flags + "server.flags", "--shard=0",
                 "--bind=tcp://127.0.0.1:*", "--store=" + (dir / "store").string(),
                 "--port_file=" + (dir / "port").string()},
                (dir / "server.log").string());
  const auto endpoint = WaitForLine(dir / "port", absl::Seconds(20));
  ASSERT_TRUE(endpoint.has_value()) << "the shard did not start with server.flags";
  // One step of the flag file's model, without sync: every flag in the file parses and fits.
  const auto [status, log] = RunToExit(
      WorkerBinary(), {"--flagfile=" + flags + "worker.flags", "--steps=1"}, dir / "worker.log");
  EXPECT_EQ(status, 0) << log;
  shard.Signal(SIGTERM);
  EXPECT_EQ(shard.Wait(absl::Seconds(20)), std::optional<int>(0));
}

}  // namespace
}  // namespace diloco::testing
