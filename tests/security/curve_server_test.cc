// A real diloco-server with CURVE on 127.0.0.1: only listed keys get in, a listed key may only
// speak as its own worker id (a worker that tries exits 2 with the shard's reason), a worker
// with another server's key or none exits 2 naming the shard, and a diloco-worker with its key
// trains through it.
#include <gtest/gtest.h>

#include <fstream>

#include "tests/security/security_util.h"

namespace diloco::testing {
namespace {

using wire::MsgType;

class CurveServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestDir();
    server_ = wire::NewCurveKeyPair().value();
    w1_ = wire::NewCurveKeyPair().value();
    w2_ = wire::NewCurveKeyPair().value();
    stranger_ = wire::NewCurveKeyPair().value();
    ASSERT_TRUE(wire::WriteKeyPair((dir_ / "server").string(), server_).ok());
    ASSERT_TRUE(wire::WriteKeyPair((dir_ / "w1").string(), w1_).ok());
    std::ofstream(dir_ / "authorized_keys")
        << "# worker_id key\n1 " << w1_.public_key << "\n2 " << w2_.public_key << "\n";
    server_proc_ = std::make_unique<Process>(
        std::vector<std::string>{ServerBinary(), "--bind=tcp://127.0.0.1:*",
                                 "--port_file=" + (dir_ / "port").string(), "--fragments=4",
                                 std::string("--model=") + kModel, "--grace_cap=1s",
                                 "--worker_timeout=2s", "--progress_interval=1000s",
                                 "--curve_secret_key_file=" + (dir_ / "server.secret").string(),
                                 "--curve_authorized_keys=" + (dir_ / "authorized_keys").string()},
        (dir_ / "server.log").string());
    auto ep = WaitForLine(dir_ / "port", absl::Seconds(20));
    ASSERT_TRUE(ep.has_value()) << "server did not start";
    endpoint_ = *ep;
  }

  void TearDown() override {
    server_proc_.reset();  // stopped by PID before its directory goes
    if (!HasFailure()) std::filesystem::remove_all(dir_);
  }

  // Runs diloco-ctl stats against the shard with `extra` flags; its exit status and output.
  std::pair<std::optional<int>, std::string> CtlStats(const std::vector<std::string>& extra) {
    std::vector<std::string> argv = {DILOCO_CTL_BINARY, "stats", "--server=" + endpoint_,
                                     "--timeout_ms=3000"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const auto log = dir_ / "ctl.log";
    std::filesystem::remove(log);
    Process ctl(argv, log.string());
    const auto status = ctl.Wait(absl::Seconds(30));
    std::ifstream in(log);
    return {status, std::string((std::istreambuf_iterator<char>(in)), {})};
  }

  std::optional<wire::Message> Hello(const wire::CurveKeyPair* keys, uint32_t worker,
                                     absl::Duration wait = absl::Seconds(10)) {
    return Ask(endpoint_, TinyHeader(MsgType::Hello, worker), server_.public_key, keys, wait);
  }

  std::filesystem::path dir_;
  wire::CurveKeyPair server_, w1_, w2_, stranger_;
  std::unique_ptr<Process> server_proc_;
  std::string endpoint_;
};

TEST_F(CurveServerTest, ListedKeyIsWelcomed) {
  auto r = Hello(&w1_, 1);
  ASSERT_TRUE(r.has_value()) << "no reply to a listed key";
  EXPECT_EQ(r->type(), MsgType::Welcome);
  EXPECT_EQ(r->header().worker_id(), 1u);
}

TEST_F(CurveServerTest, UnlistedKeyGetsNothing) {
  ASSERT_TRUE(Hello(&w2_, 2).has_value());  // the server answers listed keys meanwhile
  EXPECT_FALSE(Hello(&stranger_, 1, absl::Seconds(1.5)).has_value());
}

TEST_F(CurveServerTest, PlaintextClientGetsNothing) {
  ASSERT_TRUE(Hello(&w1_, 1).has_value());
  EXPECT_FALSE(Hello(nullptr, 1, absl::Seconds(1.5)).has_value());
}

TEST_F(CurveServerTest, ListedKeyClaimingAnotherWorkerIsRefused) {
  auto r = Hello(&w1_, 2);  // w1's key, worker 2's id
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->type(), MsgType::Error);
  EXPECT_EQ(r->header().error_code(), wire::ErrorCode::BadIdentity);
  EXPECT_EQ(r->header().refused_type(), MsgType::Hello);
  // Counted, and worker 2 was never registered by the impostor.
  auto stats =
      Ask(endpoint_, TinyHeader(MsgType::Stats, 1), server_.public_key, &w1_, absl::Seconds(10));
  ASSERT_TRUE(stats.has_value() && stats->header().message());
  const std::string json = stats->header().message()->str();
  EXPECT_EQ(JsonNumber(json, "identity_refused"), std::optional<double>(1)) << json;
  EXPECT_EQ(JsonNumber(json, "workers"), std::optional<double>(0)) << json;
}

TEST_F(CurveServerTest, WorkerTrainsOverCurve) {
  auto argv = LoneWorkerArgs(endpoint_, 1, dir_ / "w1.jsonl");
  argv.push_back("--curve_server_key=" + server_.public_key);
  argv.push_back("--curve_secret_key_file=" + (dir_ / "w1.secret").string());
  Process worker(argv, (dir_ / "worker.log").string());
  // Past the join (one adoption per fragment): rounds closed and were adopted over CURVE.
  EXPECT_TRUE(WaitForAdoptions(dir_ / "w1.jsonl", 3 * kFragments, absl::Seconds(60)))
      << "the worker never adopted over CURVE; see " << dir_;
  worker.Signal(SIGTERM);
  worker.Wait(absl::Seconds(20));
}

TEST_F(CurveServerTest, WorkerWithAnotherWorkersKeyExitsWithTheShardsReason) {
  auto argv = LoneWorkerArgs(endpoint_, 2, dir_ / "w2.jsonl");  // worker 2 with w1's key
  argv.push_back("--curve_server_key=" + server_.public_key);
  argv.push_back("--curve_secret_key_file=" + (dir_ / "w1.secret").string());
  Process worker(argv, (dir_ / "worker.log").string());
  ASSERT_EQ(worker.Wait(absl::Seconds(30)), std::optional<int>(2)) << "see " << dir_;
  std::ifstream in(dir_ / "worker.log");
  const std::string log((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(log.find("refuses this worker"), std::string::npos) << log;
  EXPECT_NE(log.find("this CURVE key belongs to worker 1"), std::string::npos) << log;
  EXPECT_EQ(log.find("training unsynced"), std::string::npos) << log;
}

// A key the shard's allow-list does not hold is refused in the CURVE handshake itself: no
// message ever reaches the worker, only a handshake event. The worker must say so and stop,
// not train unsynced with errors counted and exit 0.
TEST_F(CurveServerTest, WorkerWithAnUnlistedKeyExitsWithTheShardsReason) {
  ASSERT_TRUE(wire::WriteKeyPair((dir_ / "stranger").string(), stranger_).ok());
  auto argv = LoneWorkerArgs(endpoint_, 1, dir_ / "w1.jsonl");
  argv.push_back("--curve_server_key=" + server_.public_key);
  argv.push_back("--curve_secret_key_file=" + (dir_ / "stranger.secret").string());
  Process worker(argv, (dir_ / "worker.log").string());
  ASSERT_EQ(worker.Wait(absl::Seconds(30)), std::optional<int>(2)) << "see " << dir_;
  std::ifstream in(dir_ / "worker.log");
  const std::string log((std::istreambuf_iterator<char>(in)), {});
  EXPECT_NE(log.find("refuses this worker: the server refused the CURVE handshake (ZAP status "
                     "400)"),
            std::string::npos)
      << log;
  EXPECT_NE(log.find(stranger_.public_key), std::string::npos) << log;
  EXPECT_EQ(log.find("training unsynced"), std::string::npos) << log;
  // The shard tells its operator too, and counts it.
  auto stats =
      Ask(endpoint_, TinyHeader(MsgType::Stats, 1), server_.public_key, &w1_, absl::Seconds(10));
  ASSERT_TRUE(stats.has_value() && stats->header().message());
  const std::string json = stats->header().message()->str();
  EXPECT_GE(JsonNumber(json, "curve_refused").value_or(0), 1) << json;
  std::ifstream sin(dir_ / "server.log");
  const std::string slog((std::istreambuf_iterator<char>(sin)), {});
  EXPECT_NE(slog.find("CURVE handshake"), std::string::npos) << slog;
  EXPECT_NE(slog.find(stranger_.public_key + " is not in the authorized keys"), std::string::npos)
      << slog;
}

// The handshake fails without a word from the shard when the worker holds another server's
// public key (the shard cannot open its HELLO and hangs up) or no key at all (a mechanism
// mismatch, after which libzmq stops trying). Either way the worker must stop within a bound,
// naming the shard and the cause, not wait in silence.
std::string WorkerRefusal(const std::filesystem::path& dir, const std::vector<std::string>& argv) {
  Process worker(argv, (dir / "worker.log").string());
  const absl::Time start = absl::Now();
  const auto status = worker.Wait(absl::Seconds(30));
  std::ifstream in(dir / "worker.log");
  const std::string log((std::istreambuf_iterator<char>(in)), {});
  EXPECT_EQ(status, std::optional<int>(2)) << log;
  EXPECT_LT(absl::Now() - start, absl::Seconds(20)) << log;
  EXPECT_EQ(log.find("training unsynced"), std::string::npos) << log;
  return log;
}

TEST_F(CurveServerTest, WorkerWithAnotherServersKeyExitsNamingTheShard) {
  auto argv = LoneWorkerArgs(endpoint_, 1, dir_ / "w1.jsonl");
  argv.push_back("--curve_server_key=" + stranger_.public_key);  // not the shard's key
  argv.push_back("--curve_secret_key_file=" + (dir_ / "w1.secret").string());
  const std::string log = WorkerRefusal(dir_, argv);
  EXPECT_NE(log.find("the CURVE handshake with " + endpoint_), std::string::npos) << log;
  EXPECT_NE(log.find("--curve_server_key " + stranger_.public_key), std::string::npos) << log;
}

TEST_F(CurveServerTest, WorkerWithoutKeysExitsNamingTheShard) {
  const std::string log = WorkerRefusal(dir_, LoneWorkerArgs(endpoint_, 1, dir_ / "w1.jsonl"));
  EXPECT_NE(log.find("the server at " + endpoint_ + " requires CURVE and this client has no keys"),
            std::string::npos)
      << log;
}

// An operator asks a CURVE shard for its statistics with a listed key; an unlisted key and no
// key at all are told why there is no answer.
TEST_F(CurveServerTest, CtlStatsTakesCurveKeys) {
  ASSERT_TRUE(wire::WriteKeyPair((dir_ / "stranger").string(), stranger_).ok());
  const std::string server_key = "--curve_server_key=" + (dir_ / "server.public").string();
  auto [ok, json] =
      CtlStats({server_key, "--curve_secret_key_file=" + (dir_ / "w1.secret").string()});
  EXPECT_EQ(ok, std::optional<int>(0)) << json;
  EXPECT_EQ(JsonNumber(json, "shard"), std::optional<double>(0)) << json;

  auto [refused, why] =
      CtlStats({server_key, "--curve_secret_key_file=" + (dir_ / "stranger.secret").string()});
  EXPECT_EQ(refused, std::optional<int>(1)) << why;
  EXPECT_NE(why.find("PERMISSION_DENIED"), std::string::npos) << why;
  EXPECT_NE(why.find("refused the CURVE handshake"), std::string::npos) << why;

  auto [silent, hint] = CtlStats({});
  EXPECT_EQ(silent, std::optional<int>(1)) << hint;
  EXPECT_NE(hint.find("--curve_secret_key_file"), std::string::npos) << hint;

  auto [half, usage] = CtlStats({server_key});
  EXPECT_EQ(half, std::optional<int>(2)) << usage;
  EXPECT_NE(usage.find("CURVE needs both"), std::string::npos) << usage;
}

}  // namespace
}  // namespace diloco::testing
