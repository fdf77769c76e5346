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

// Runs `binary` with `defaults` then the case's flags (a flag given twice: the last wins) and
// expects the refusal: exit status 2 and the case's message in the log.
void ExpectRefused(const std::string& binary, std::vector<std::string> defaults, const Case& c,
                   const std::filesystem::path& log) {
  for (absl::string_view f : absl::StrSplit(c.flags, ' ')) defaults.emplace_back(f);
  const auto [status, out] = RunToExit(binary, defaults, log);
  EXPECT_EQ(status, 2) << c.flags << "\n" << out;
  EXPECT_NE(out.find(c.message), std::string::npos) << c.flags << "\n" << out;
}

TEST(FlagsTest, WorkerRefusesBadFlagsWithAMessage) {
  const auto dir = TestDir();
  const std::vector<Case> cases = {
      {"--device=tpu", "--device=tpu: expected cpu, cuda or synthetic"},
      // A CPU-only build says it has no CUDA backend; a CUDA build counts the GPUs it can use.
      {"--device=cuda --gpus=64", "--device=cuda"},
      {"--device=cuda --gpus=0", "--gpus must be at least 1"},
      {"--codec=int9", "unknown codec 'int9'"},
      {"--step_slowdown=0.5", "--step_slowdown=0.5: expected a finite factor >= 1"},
      {"--step_slowdown=nan", "expected a finite factor >= 1"},
      {"--model=L=0", "model spec 'L=0'"},
      {"--heartbeat=5s --shard_timeout=1s --servers=tcp://127.0.0.1:9",
       "--heartbeat must be positive and shorter than --shard_timeout"},
      {"--data=bin:/nonexistent/tokens.bin", "/nonexistent/tokens.bin"},
      {"--adopt=copy --servers=tcp://127.0.0.1:9", "--adopt=copy: expected keep or lerp"},
      {"--adopt=keep --adopt_alpha=0.5 --servers=tcp://127.0.0.1:9",
       "--adopt_alpha applies to --adopt=lerp only"},
      {"--adopt=lerp --adopt_alpha=1.5 --servers=tcp://127.0.0.1:9",
       "adopt_alpha must be in [0, 1]"},
      // Refused at start, not after the run.
      {"--save_model=/nonexistent/dir/m.safetensors",
       "/nonexistent/dir/m.safetensors: directory /nonexistent/dir does not exist"},
      {"--save_model=/tmp", "/tmp: is a directory"},
  };
  for (const Case& c : cases)
    ExpectRefused(WorkerBinary(), {"--model=tiny", "--steps=1"}, c, dir / "worker.log");
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
      {"--round_norm=median", "--round_norm must be expected or arrived"},
      {"--round_step=half", "--round_step must be partial, composed or full"},
      {"--bind=tcp://999.1.1.1:1", "cannot bind tcp://999.1.1.1:1"},
      {"--metrics_jsonl=/nonexistent/dir/x.jsonl", "/nonexistent/dir/x.jsonl"},
      {"--curve_secret_key_file=/nonexistent/key", "/nonexistent/key"},
      {"--curve_authorized_keys=/nonexistent/keys", "needs --curve_secret_key_file"},
  };
  int i = 0;
  for (const Case& c : cases) {
    const auto store = dir / ("store" + std::to_string(i++));
    ExpectRefused(ServerBinary(),
                  {"--model=tiny", "--bind=tcp://127.0.0.1:*", "--store=" + store.string()}, c,
                  dir / "server.log");
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

// The main job's flag files (deploy/run-local-cluster.sh and the convergence study read them):
// a shard starts with one, and a worker with the other takes a synced step against it.
TEST(FlagsTest, MainJobFlagFilesAreAccepted) {
  const auto dir = TestDir();
  const std::string flags = std::string(DILOCO_SOURCE_DIR) + "/deploy/flags/";
  Process shard(
      {ServerBinary(), "--flagfile=" + flags + "local-server.flags", "--shard=0", "--shards=1",
       "--bind=tcp://127.0.0.1:*", "--port_file=" + (dir / "port").string()},
      (dir / "server.log").string());
  const auto endpoint = WaitForLine(dir / "port", absl::Seconds(20));
  ASSERT_TRUE(endpoint.has_value()) << "the shard did not start with local-server.flags";
  const auto [status, log] =
      RunToExit(WorkerBinary(),
                {"--flagfile=" + flags + "local-worker.flags", "--servers=" + *endpoint,
                 "--steps=2", "--join_timeout=20s", "--train_unjoined=false"},
                dir / "worker.log");
  EXPECT_EQ(status, 0) << log;
  shard.Signal(SIGTERM);
  EXPECT_EQ(shard.Wait(absl::Seconds(20)), std::optional<int>(0));
}

}  // namespace
}  // namespace diloco::testing
