// Secure by default: diloco-server refuses to serve a non-loopback address without CURVE keys
// (exit 2, naming the address and the two ways out, before anything listens or any store is
// made), refuses --insecure beside keys, and serves loopback without keys as before. What an
// --insecure shard reports is checked inside a private network namespace
// (insecure_namespace_test.sh), where binding every address reaches nothing outside.
#include <gtest/gtest.h>

#include <fstream>

#include "tests/security/security_util.h"

namespace diloco::testing {
namespace {

struct ServerRun {
  std::optional<int> status;
  std::string log;
};

// diloco-server with the tiny plan and `extra`, bounded; its exit status and output.
ServerRun Server(const std::filesystem::path& dir, const std::vector<std::string>& extra,
                 absl::Duration wait = absl::Seconds(20)) {
  std::vector<std::string> argv = {ServerBinary(),
                                   "--port_file=" + (dir / "port").string(),
                                   "--store=" + (dir / "store").string(),
                                   "--fragments=4",
                                   std::string("--model=") + kModel,
                                   "--progress_interval=1000s"};
  argv.insert(argv.end(), extra.begin(), extra.end());
  const auto log = dir / "server.log";
  std::filesystem::remove(log);
  ServerRun r;
  {
    Process p(argv, log.string());
    r.status = p.Wait(wait);
  }
  std::ifstream in(log);
  r.log.assign(std::istreambuf_iterator<char>(in), {});
  return r;
}

class ExposureTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = TestDir(); }
  void TearDown() override {
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  // A refused start: exit 2, the address named with both ways out, nothing left behind.
  void ExpectRefused(const std::vector<std::string>& flags, const std::string& named) {
    const ServerRun r = Server(dir_, flags);
    EXPECT_EQ(r.status, std::optional<int>(2)) << r.log;
    EXPECT_NE(r.log.find(named + ": not a loopback address"), std::string::npos) << r.log;
    EXPECT_NE(r.log.find("--curve_secret_key_file and --curve_authorized_keys"), std::string::npos)
        << r.log;
    EXPECT_NE(r.log.find("diloco-ctl keys"), std::string::npos) << r.log;
    EXPECT_NE(r.log.find("--insecure"), std::string::npos) << r.log;
    EXPECT_FALSE(std::filesystem::exists(dir_ / "port")) << r.log;
    EXPECT_FALSE(std::filesystem::exists(dir_ / "store")) << r.log;
  }

  std::filesystem::path dir_;
};

TEST_F(ExposureTest, EveryAddressWithoutKeysIsRefused) {
  ExpectRefused({"--bind=tcp://0.0.0.0:*"}, "--bind=tcp://0.0.0.0:*");
}

TEST_F(ExposureTest, WildcardAndOtherHostsWithoutKeysAreRefused) {
  for (const std::string bind :
       {"tcp://*:*", "tcp://10.11.12.13:5555", "tcp://eth0:5555", "tcp://[::]:5555",
        "tcp://128.0.0.1:5555", "tcp://shard0.example.org:5555"}) {
    SCOPED_TRACE(bind);
    ExpectRefused({"--bind=" + bind}, "--bind=" + bind);
  }
}

TEST_F(ExposureTest, MetricsOnAnotherHostWithoutKeysIsRefused) {
  ExpectRefused({"--bind=tcp://127.0.0.1:*", "--metrics_address=0.0.0.0:0"},
                "--metrics_address=0.0.0.0:0");
}

TEST_F(ExposureTest, InsecureBesideKeysIsRefused) {
  auto server = wire::NewCurveKeyPair().value();
  ASSERT_TRUE(wire::WriteKeyPair((dir_ / "server").string(), server).ok());
  std::ofstream(dir_ / "authorized_keys") << "";
  const ServerRun r =
      Server(dir_, {"--bind=tcp://127.0.0.1:*", "--insecure",
                    "--curve_secret_key_file=" + (dir_ / "server.secret").string(),
                    "--curve_authorized_keys=" + (dir_ / "authorized_keys").string()});
  EXPECT_EQ(r.status, std::optional<int>(2)) << r.log;
  EXPECT_NE(r.log.find("--insecure contradicts --curve_secret_key_file"), std::string::npos)
      << r.log;
}

// Loopback stays keyless and is not reported insecure; a bare metrics port is 127.0.0.1's.
TEST_F(ExposureTest, LoopbackWithoutKeysServesAndIsNotInsecure) {
  for (const auto& [bind, metrics] : {std::pair<std::string, std::string>{"tcp://127.0.0.1:*", "0"},
                                      {"tcp://127.0.0.2:*", ":0"}}) {
    SCOPED_TRACE(bind);
    std::filesystem::remove(dir_ / "port");
    std::filesystem::remove_all(dir_ / "store");
    Process p(
        {ServerBinary(), "--bind=" + bind, "--port_file=" + (dir_ / "port").string(),
         "--store=" + (dir_ / "store").string(), "--fragments=4", std::string("--model=") + kModel,
         "--progress_interval=1000s", "--metrics_address=" + metrics},
        (dir_ / "server.log").string());
    auto ep = WaitForLine(dir_ / "port", absl::Seconds(20));
    ASSERT_TRUE(ep.has_value()) << "the shard did not start on " << bind;
    auto stats = wire::RequestStats(*ep, absl::Seconds(10));
    ASSERT_TRUE(stats.ok()) << stats.status();
    EXPECT_NE(stats->find("\"insecure\":false"), std::string::npos) << *stats;
    p.Signal(SIGTERM);
    EXPECT_EQ(p.Wait(absl::Seconds(20)), std::optional<int>(0));
    std::ifstream in(dir_ / "server.log");
    const std::string log((std::istreambuf_iterator<char>(in)), {});
    EXPECT_NE(log.find("Prometheus metrics on 127.0.0.1:0, port"), std::string::npos) << log;
    EXPECT_NE(log.find("no CURVE (loopback only)"), std::string::npos) << log;
    EXPECT_EQ(log.find("WARNING"), std::string::npos) << log;
  }
}

}  // namespace
}  // namespace diloco::testing
