// The multi-process helpers when a program does not start: Process names why it could not be
// executed, and LocalShards::StartShards stops its caller (which would go on to use
// `endpoints`) with the shard's exit status and log, as soon as the shard has exited.
// A binary being relinked while tests run (ETXTBSY, ENOENT) is the case met in practice: it
// used to leave `endpoints` empty after a 20 s wait, and SlowLinkTest's SetUp then read
// endpoints[0] and the test process died of SIGSEGV.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "tests/integration/cluster.h"
#include "tests/util/temp_dir.h"

namespace diloco::testing {
namespace {

using ::testing::HasSubstr;

std::string Slurp(const std::filesystem::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(ProcessTest, AProgramThatCannotBeExecutedExits127AndSaysWhy) {
  TempDir dir;
  Process p({dir.Sub("missing"), "--flag"}, dir.Sub("log"));
  EXPECT_EQ(p.exec_error().code(), absl::StatusCode::kNotFound) << p.exec_error();
  EXPECT_THAT(p.exec_error().message(), HasSubstr(dir.Sub("missing")));
  EXPECT_EQ(p.Wait(absl::Seconds(10)), std::optional<int>(127));
  EXPECT_THAT(Slurp(dir.Sub("log")), HasSubstr("cannot execute " + dir.Sub("missing")));
}

TEST(ProcessTest, AProgramThatRunsHasNoExecError) {
  TempDir dir;
  Process p({"/bin/sh", "-c", "echo ran; exit 3"}, dir.Sub("log"));
  EXPECT_TRUE(p.exec_error().ok()) << p.exec_error();
  EXPECT_EQ(p.Wait(absl::Seconds(10)), std::optional<int>(3));
  EXPECT_EQ(Slurp(dir.Sub("log")), "ran\n");
}

// Starts one shard the way the multi-process fixtures do, then uses its endpoint;
// returns what stopped it.
std::string StartAndUse(LocalShards& shards) {
  try {
    shards.StartShards(1);
  } catch (const ShardsDidNotStart& e) {
    EXPECT_TRUE(shards.endpoints.empty());
    return e.what();
  }
  if (shards.endpoints.size() != 1) return "StartShards returned without an endpoint";
  return "StartShards returned " + shards.endpoints[0];
}

TEST(LocalShardsStartTest, AShardThatCannotBeExecutedStopsTheCallerWithTheCause) {
  LocalShards shards;
  shards.dir = TestDir();
  shards.server_binary = (shards.dir / "diloco-server-being-relinked").string();
  const absl::Time start = absl::Now();
  const std::string why = StartAndUse(shards);
  EXPECT_THAT(why, HasSubstr("shard 0 exited with status 127 before writing its port file"));
  EXPECT_THAT(why, HasSubstr("cannot execute " + shards.server_binary));
  // Told once the shard has gone, not after the 20 s the port file is waited for.
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST(LocalShardsStartTest, AShardThatExitsAtOnceStopsTheCallerWithItsLog) {
  LocalShards shards;
  shards.dir = TestDir();
  const auto script = shards.dir / "exits";
  { std::ofstream(script) << "#!/bin/sh\necho \"refusing $1\" >&2\nexit 3\n"; }
  ASSERT_EQ(::chmod(script.c_str(), 0755), 0);
  shards.server_binary = script.string();
  const absl::Time start = absl::Now();
  const std::string why = StartAndUse(shards);
  EXPECT_THAT(why, HasSubstr("shard 0 exited with status 3 before writing its port file"));
  EXPECT_THAT(why, HasSubstr("refusing --bind=tcp://127.0.0.1:*"));
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST(LocalShardsStartTest, AShardThatStartsGivesItsEndpoint) {
  LocalShards shards;
  shards.dir = TestDir();
  const auto script = shards.dir / "starts";
  // Writes the port file as diloco-server does (a rename), then stays up until stopped.
  {
    std::ofstream(script) << "#!/bin/sh\nfor a; do case \"$a\" in --port_file=*) "
                             "f=${a#--port_file=};; esac; done\n"
                             "echo tcp://127.0.0.1:4242 > \"$f.tmp\" && mv \"$f.tmp\" \"$f\"\n"
                             "exec sleep 60\n";
  }
  ASSERT_EQ(::chmod(script.c_str(), 0755), 0);
  shards.server_binary = script.string();
  EXPECT_EQ(StartAndUse(shards), "StartShards returned tcp://127.0.0.1:4242");
  ASSERT_EQ(shards.shards.size(), 1u);
  EXPECT_TRUE(shards.shards[0]->Running());
}

}  // namespace
}  // namespace diloco::testing
