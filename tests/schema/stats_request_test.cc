// RequestStats (diloco-ctl stats, top, the test clusters) against a shard that refuses the
// handshake. libzmq ends a connection refused for its mechanism and does not reconnect, so the
// DEALER is left with no pipe; a blocking send on it would wait forever, past any deadline (a
// diloco-ctl that never exited, when the refusal came before its request was queued).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <thread>
#include <zmq.hpp>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "schema/curve.h"
#include "schema/handshake_monitor.h"
#include "schema/transport.h"

namespace diloco::wire {
namespace {

class CurveShardStandIn : public ::testing::Test {
 protected:
  void SetUp() override {
    keys_ = NewCurveKeyPair().value();
    router_.set(zmq::sockopt::linger, 0);
    ASSERT_TRUE(MakeCurveServer(router_, keys_.secret_key).ok());
    router_.bind("tcp://127.0.0.1:*");
    endpoint_ = router_.get(zmq::sockopt::last_endpoint);
  }

  zmq::context_t ctx_{1};
  zmq::socket_t router_{ctx_, zmq::socket_type::router};
  CurveKeyPair keys_;
  std::string endpoint_;
};

// The library behaviour RequestStats is written against: once the refusal is seen, sends find
// no pipe (EAGAIN without blocking; a blocking send would never return).
TEST_F(CurveShardStandIn, AKeylessDealerRefusedForItsMechanismKeepsNoPipe) {
  zmq::context_t ctx(1);
  zmq::socket_t dealer(ctx, zmq::socket_type::dealer);
  dealer.set(zmq::sockopt::linger, 0);
  HandshakeMonitor monitor(ctx, dealer);
  dealer.connect(endpoint_);
  std::optional<std::string> refusal;
  for (const absl::Time end = absl::Now() + absl::Seconds(20); !refusal && absl::Now() < end;) {
    absl::SleepFor(absl::Milliseconds(5));
    refusal = monitor.TakeRefusal();
  }
  ASSERT_TRUE(refusal.has_value()) << "no refusal event";
  EXPECT_NE(refusal->find("requires CURVE"), std::string::npos) << *refusal;
  bool no_pipe = false;
  for (const absl::Time end = absl::Now() + absl::Seconds(20); !no_pipe && absl::Now() < end;) {
    no_pipe = !dealer.send(zmq::str_buffer("x"), zmq::send_flags::dontwait);
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_TRUE(no_pipe) << "a refused DEALER still accepted sends";
}

// A keyless request is told why, quickly, whenever the refusal comes; many times over, so that
// the refusal lands before the request in some of them.
TEST_F(CurveShardStandIn, AKeylessStatsRequestIsRefusedNamingTheKeys) {
  for (int i = 0; i < 20; ++i) {
    const absl::Time start = absl::Now();
    const auto stats = RequestStats(endpoint_, absl::Seconds(10));
    ASSERT_EQ(stats.status().code(), absl::StatusCode::kPermissionDenied) << stats.status();
    EXPECT_NE(stats.status().message().find("requires CURVE"), std::string::npos) << stats.status();
    EXPECT_NE(stats.status().message().find("--curve_secret_key_file"), std::string::npos)
        << stats.status();
    EXPECT_LT(absl::Now() - start, absl::Seconds(10)) << "attempt " << i;
  }
}

// A server that reads each connection's first bytes and closes it: what a keyless client of a
// busy CURVE server sees when the server's close overtakes its greeting (schema/
// handshake_monitor.h). Before the client counted such closes, RequestStats waited out its
// deadline (reproduced beside four busy loops: 10 of 10 runs of the test above timed out).
TEST(ClosingServer, AServerThatClosesEveryHandshakeIsNamedNotLeftToTheDeadline) {
  const int listener = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(listener, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(bind(listener, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(listener, 16), 0);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(getsockname(listener, reinterpret_cast<sockaddr*>(&addr), &len), 0);
  std::atomic<bool> stop{false};
  std::atomic<int> closed{0};
  std::thread server([&] {
    while (!stop) {
      pollfd p{listener, POLLIN, 0};
      if (poll(&p, 1, 20) <= 0) continue;
      const int c = accept(listener, nullptr, nullptr);
      if (c < 0) continue;
      char buf[64];
      pollfd q{c, POLLIN, 0};
      if (poll(&q, 1, 1000) > 0) (void)read(c, buf, sizeof(buf));
      close(c);
      ++closed;
    }
  });
  const absl::Time start = absl::Now();
  const auto stats =
      RequestStats(absl::StrCat("tcp://127.0.0.1:", ntohs(addr.sin_port)), absl::Seconds(30));
  stop = true;
  server.join();
  close(listener);
  ASSERT_EQ(stats.status().code(), absl::StatusCode::kPermissionDenied) << stats.status();
  EXPECT_NE(stats.status().message().find("requires CURVE"), std::string::npos) << stats.status();
  EXPECT_NE(stats.status().message().find("--curve_secret_key_file"), std::string::npos)
      << stats.status();
  EXPECT_GE(closed.load(), HandshakeMonitor::kFailedHandshakes);
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

}  // namespace
}  // namespace diloco::wire
