// Bad flags and unusable inputs at start: diloco-server and diloco-worker exit with status 2 and
// a message naming the problem, before anything lasting happens (no shard store is created); a
// bad enum value is refused as it is parsed, naming the choices. The plan flags (--model,
// --fragments, --shards) are one definition in every program. diloco-ctl answers a bad
// subcommand or flag with its usage text and status 2. And the example flag files that the
// deploy recipes use (deploy/flags) are accepted.
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
      {"--device=tpu",
       "Illegal value 'tpu' specified for flag 'device'; must be cpu, cuda or synthetic"},
      // A CPU-only build says it has no CUDA backend; a CUDA build counts the GPUs it can use.
      {"--device=cuda --gpus=64", "--device=cuda"},
      {"--device=cuda --gpus=0", "--gpus must be at least 1"},
      {"--codec=int9", "unknown codec 'int9'"},
      {"--codec=auto --auto_codecs=int8,int9", "--codec=auto: codec int9 to choose from"},
      {"--codec=auto --auto_codecs=,", "--codec=auto: no codec to choose from"},
      {"--inner_steps=often", "--inner_steps=often: expected a positive number of steps or auto"},
      {"--inner_steps=0", "--inner_steps=0: expected a positive number of steps or auto"},
      {"--inner_steps=auto --inner_steps_min=80 --inner_steps_max=40",
       "--inner_steps=auto: expected 1 <= the smallest H (80) <= the largest (40)"},
      {"--link_margin=0.5 --servers=tcp://127.0.0.1:9",
       "--link_margin=0.5: expected a factor >= 1"},
      {"--lockstep --codec=auto --servers=tcp://127.0.0.1:9",
       "lockstep runs are deterministic and take a fixed codec and H, not auto"},
      {"--start_step=1", "--start_step=1: expected a step in [0, --steps) (--steps=1)"},
      {"--start_step=-3", "--start_step=-3: expected a step in [0, --steps)"},
      {"--step_slowdown=0.5", "--step_slowdown=0.5: expected a finite factor >= 1"},
      {"--step_slowdown=nan", "expected a finite factor >= 1"},
      {"--model=L=0", "--model=L=0: model spec 'L=0'"},
      {"--model=manifest:/nonexistent/m.json",
       "--model=manifest:/nonexistent/m.json: cannot open manifest file /nonexistent/m.json"},
      {"--fragments=0", "--fragments=0: the plan needs at least one fragment"},
      {"--shards=2 --servers=tcp://127.0.0.1:9",
       "--shards=2: does not match the 1 shards of --servers"},
      {"--no_such_flag=1", "Unknown command line flag 'no_such_flag'"},
      {"--grad_clip=-1", "--grad_clip must be >= 0"},
      {"--carry_max=0 --servers=tcp://127.0.0.1:9", "--carry_max=0: must be at least 1"},
      {"--link_floor_mbit=0 --servers=tcp://127.0.0.1:9",
       "--link_floor_mbit=0: expected a positive rate"},
      {"--heartbeat=5s --shard_timeout=1s --servers=tcp://127.0.0.1:9",
       "--heartbeat=5s: must be positive and shorter than --shard_timeout=1s"},
      {"--data=bin:/nonexistent/tokens.bin", "/nonexistent/tokens.bin"},
      {"--adopt=copy --servers=tcp://127.0.0.1:9",
       "Illegal value 'copy' specified for flag 'adopt'; must be keep or lerp"},
      {"--adopt=keep --adopt_alpha=0.5 --servers=tcp://127.0.0.1:9",
       "--adopt_alpha=0.5: applies to --adopt=lerp only"},
      {"--adopt=lerp --adopt_alpha=1.5 --servers=tcp://127.0.0.1:9",
       "--adopt_alpha=1.5: must be in [0, 1]"},
      {"--extrapolate=4 --servers=tcp://127.0.0.1:9", "--extrapolate=4: must be in [1, 3]"},
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
      {"--model=bogus", "--model=bogus: model spec 'bogus'"},
      {"--model=hf:/nonexistent",
       "--model=hf:/nonexistent: Hugging Face folder /nonexistent: not a directory"},
      {"--shards=2 --shard=5", "--shard=5: out of range for --shards=2"},
      {"--fragments=0", "--fragments=0: the plan needs at least one fragment"},
      {"--shards=0", "--shards=0: the plan needs at least one shard"},
      {"--durability=sometimes",
       "Illegal value 'sometimes' specified for flag 'durability'; must be periodic or per-round"},
      {"--outer=adam",
       "Illegal value 'adam' specified for flag 'outer'; must be rounds or delayed-nesterov"},
      {"--merge=median", "Illegal value 'median' specified for flag 'merge'; must be mean or rda"},
      {"--merge_order=random",
       "Illegal value 'random' specified for flag 'merge_order'; must be arrival or worker"},
      {"--round_norm=median",
       "Illegal value 'median' specified for flag 'round_norm'; must be expected or arrived"},
      {"--round_step=half",
       "Illegal value 'half' specified for flag 'round_step'; must be partial, composed or full"},
      {"--weights=heavy",
       "Illegal value 'heavy' specified for flag 'weights'; must be tokens2_over_steps, tokens or "
       "uniform"},
      {"--download_codec=int9", "--download_codec=int9: unknown codec 'int9'"},
      {"--no_such_flag=1", "Unknown command line flag 'no_such_flag'"},
      {"--bind=tcp://127.0.0.1:abc", "cannot bind tcp://127.0.0.1:abc"},
      {"--bind=tcp://0.0.0.0:1", "--bind=tcp://0.0.0.0:1: not a loopback address"},
      {"--metrics_jsonl=/nonexistent/dir/x.jsonl", "/nonexistent/dir/x.jsonl"},
      {"--curve_secret_key_file=/nonexistent/key", "/nonexistent/key"},
      {"--curve_authorized_keys=/nonexistent/keys", "needs --curve_secret_key_file"},
      {"--test_read_delay=-1s", "--test_read_delay=-1s: must be >= 0"},
      {"--test_drop_pushes=1", "--test_drop_pushes=1: the fraction of pushes to drop must be in"},
      {"--quorum=0", "--quorum=0: must be at least 1"},
      {"--push_norm_cap=0.5", "--push_norm_cap=0.5: must be 0 (off) or at least 1"},
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

std::string CtlBinary() { return DILOCO_CTL_BINARY; }

// The plan flags' entry in `binary --helpfull`: the lines under "Flags from
// .../common/plan_flags.cc:" (each flag with its help and default), or "" when absent.
std::string PlanFlagsHelp(const std::vector<std::string>& argv, const std::filesystem::path& log) {
  const auto [status, out] = RunToExit(argv[0], {argv.begin() + 1, argv.end()}, log);
  const auto at = out.find("common/plan_flags.cc:");
  if (at == std::string::npos) return "";
  const auto end = out.find("\n\n", at);
  return out.substr(at, end == std::string::npos ? std::string::npos : end - at);
}

// One definition, one default: every program lists the same --model, --fragments and --shards.
TEST(FlagsTest, PlanFlagsMeanTheSameInEveryProgram) {
  const auto dir = TestDir();
  const std::string server = PlanFlagsHelp({ServerBinary(), "--helpfull"}, dir / "server.log");
  ASSERT_NE(server.find("--fragments"), std::string::npos) << server;
  EXPECT_NE(server.find("default: 4;"), std::string::npos) << server;
  EXPECT_NE(server.find("default: \"small\";"), std::string::npos) << server;
  EXPECT_NE(server.find("--shards"), std::string::npos) << server;
  EXPECT_EQ(PlanFlagsHelp({WorkerBinary(), "--helpfull"}, dir / "worker.log"), server);
  EXPECT_EQ(PlanFlagsHelp({CtlBinary(), "--helpfull"}, dir / "ctl.log"), server);
}

// A subcommand it does not know, a flag nobody defines, a flag of another subcommand, a bad
// enum value: the message, the usage text, status 2.
TEST(FlagsTest, CtlRefusesBadCommandLinesWithUsage) {
  const auto dir = TestDir();
  const std::vector<Case> cases = {
      {"", "missing subcommand"},
      {"frobnicate --store=x", "unknown subcommand 'frobnicate'"},
      {"show --no_such_flag=1", "Unknown command line flag 'no_such_flag'"},
      {"show --model=tiny --store=x", "show does not take --model"},
      {"export --format=onnx --model=tiny --fragments=4 --shards=1 --out=x y",
       "Illegal value 'onnx' specified for flag 'format'; must be safetensors or hf"},
      {"gen-data --out=x --tokens=many", "Illegal value 'many' specified for flag 'tokens'"},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv;
    for (absl::string_view f : absl::StrSplit(c.flags, ' ', absl::SkipEmpty()))
      argv.emplace_back(f);
    const auto [status, out] = RunToExit(CtlBinary(), argv, dir / "ctl.log");
    EXPECT_EQ(status, 2) << c.flags << "\n" << out;
    EXPECT_NE(out.find(c.message), std::string::npos) << c.flags << "\n" << out;
    EXPECT_NE(out.find("usage:\n  diloco-ctl show"), std::string::npos) << c.flags << "\n" << out;
  }
  // Asking for the usage is not an error.
  const auto [status, out] = RunToExit(CtlBinary(), {"help"}, dir / "ctl.log");
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("usage:"), std::string::npos) << out;
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
