#include "tests/util/throttle_proxy.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace diloco::testing {
namespace {

using Clock = std::chrono::steady_clock;

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

sockaddr_in Loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

// An owned socket.
class Fd {
 public:
  explicit Fd(int fd = -1) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

int ConnectTo(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  const sockaddr_in addr = Loopback(port);
  if (fd >= 0 && connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

bool SendAll(int fd, const std::string& data) {
  for (size_t done = 0; done < data.size();) {
    const ssize_t n = send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return false;
    done += static_cast<size_t>(n);
  }
  return true;
}

// Reads until EOF or an error.
std::string RecvAll(int fd) {
  std::string out;
  char buf[16384];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

// Whether `fd` reports EOF or an error within `timeout_ms` (and no data).
bool ClosedWithin(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) != 1) return false;
  char byte;
  return recv(fd, &byte, 1, MSG_DONTWAIT) <= 0;
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(rng());
  return out;
}

// A plain TCP server on 127.0.0.1: runs `handler(fd)` for each accepted connection in a thread of
// its own, then closes the fd. Destroy it after the connections to it have ended.
class TestServer {
 public:
  explicit TestServer(std::function<void(int)> handler) : handler_(std::move(handler)) {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr = Loopback(0);
    socklen_t len = sizeof(addr);
    if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        listen(listen_fd_, 16) == 0 &&
        getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port_ = ntohs(addr.sin_port);
    }
    thread_ = std::thread([this] { AcceptLoop(); });
  }
  ~TestServer() {
    stop_.store(true);
    thread_.join();
    for (std::thread& t : handlers_) t.join();
    close(listen_fd_);
  }

  int port() const { return port_; }

 private:
  void AcceptLoop() {
    while (!stop_.load()) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (poll(&p, 1, 20) != 1) continue;
      const int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      handlers_.emplace_back([this, fd] {
        handler_(fd);
        close(fd);
      });
    }
  }

  std::function<void(int)> handler_;
  int listen_fd_ = -1;
  int port_ = 0;
  std::atomic<bool> stop_{false};
  std::vector<std::thread> handlers_;
  std::thread thread_;
};

TEST(ThrottleProxyTest, RejectsBadArguments) {
  EXPECT_FALSE(ThrottleProxy::Start(5555, 0).ok());
  EXPECT_FALSE(ThrottleProxy::Start(5555, -1).ok());
  EXPECT_FALSE(ThrottleProxy::Start(5555, 1000, 0).ok());
  EXPECT_FALSE(ThrottleProxy::Start(0, 1000).ok());
}

TEST(ThrottleProxyTest, ForwardsBothDirectionsInOrder) {
  // Echo upstream; it also keeps what it received.
  std::mutex mu;
  std::string upstream_received;
  std::promise<void> upstream_done;
  TestServer server([&](int fd) {
    char buf[8192];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) {
      {
        std::lock_guard<std::mutex> lock(mu);
        upstream_received.append(buf, static_cast<size_t>(n));
      }
      if (!SendAll(fd, std::string(buf, static_cast<size_t>(n)))) break;
    }
    upstream_done.set_value();
  });
  ASSERT_GT(server.port(), 0);
  absl::StatusOr<std::unique_ptr<ThrottleProxy>> proxy = ThrottleProxy::Start(server.port(), 20e6);
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  EXPECT_EQ((*proxy)->endpoint(), "tcp://127.0.0.1:" + std::to_string((*proxy)->port()));

  const std::string data = RandomBytes(300 * 1024, 7);
  Fd client(ConnectTo((*proxy)->port()));
  ASSERT_GE(client.get(), 0);
  // Writes from a thread: the echo comes back while we are still sending.
  std::thread writer([&] {
    EXPECT_TRUE(SendAll(client.get(), data));
    shutdown(client.get(), SHUT_WR);
  });
  const std::string echoed = RecvAll(client.get());  // EOF: upstream closed after our EOF
  writer.join();
  ASSERT_EQ(upstream_done.get_future().wait_for(std::chrono::seconds(5)),
            std::future_status::ready);

  EXPECT_EQ(echoed.size(), data.size());
  EXPECT_TRUE(echoed == data) << "echo differs from what was sent";
  std::lock_guard<std::mutex> lock(mu);
  EXPECT_EQ(upstream_received.size(), data.size());
  EXPECT_TRUE(upstream_received == data) << "upstream got different bytes";
  EXPECT_EQ((*proxy)->bytes_forwarded(), 2 * data.size());
}

TEST(ThrottleProxyTest, RespectsRate) {
  constexpr size_t kBytes = 200'000;
  std::promise<size_t> sink_total;
  TestServer server([&](int fd) { sink_total.set_value(RecvAll(fd).size()); });
  absl::StatusOr<std::unique_ptr<ThrottleProxy>> proxy = ThrottleProxy::Start(server.port(), 100e3);
  ASSERT_TRUE(proxy.ok()) << proxy.status();

  const double cpu_start = ProcessCpuSeconds();
  const Clock::time_point start = Clock::now();
  Fd client(ConnectTo((*proxy)->port()));
  ASSERT_GE(client.get(), 0);
  ASSERT_TRUE(SendAll(client.get(), std::string(kBytes, 'x')));
  shutdown(client.get(), SHUT_WR);
  std::future<size_t> total = sink_total.get_future();
  ASSERT_EQ(total.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  const double seconds = SecondsSince(start);
  const double cpu = ProcessCpuSeconds() - cpu_start;

  EXPECT_EQ(total.get(), kBytes);
  // 2 s at 100 KB/s, less the first burst.
  EXPECT_GE(seconds, 1.5);
  EXPECT_LE(seconds, 4.0);
  // Waiting for tokens sleeps in poll(): far less CPU than wall time.
  EXPECT_LT(cpu, 0.25 * seconds) << "cpu " << cpu << " s in " << seconds << " s";
}

TEST(ThrottleProxyTest, SmallMessageNotHeldBehindLargeTransfer) {
  constexpr size_t kLarge = 1'000'000;
  constexpr size_t kSmall = 100;
  // The first byte tells the connections apart: 'L' large, 'S' small.
  std::atomic<size_t> large_received{0};
  std::promise<Clock::time_point> small_arrived;
  TestServer server([&](int fd) {
    std::string got;
    char buf[8192];
    ssize_t n;
    while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) {
      got.append(buf, static_cast<size_t>(n));
      if (got[0] == 'L') {
        large_received.fetch_add(static_cast<size_t>(n));
      } else if (got.size() == kSmall) {
        small_arrived.set_value(Clock::now());
      }
    }
  });
  absl::StatusOr<std::unique_ptr<ThrottleProxy>> proxy = ThrottleProxy::Start(server.port(), 200e3);
  ASSERT_TRUE(proxy.ok()) << proxy.status();

  Fd large(ConnectTo((*proxy)->port()));
  ASSERT_GE(large.get(), 0);
  std::thread writer([&] {
    EXPECT_TRUE(SendAll(large.get(), std::string(kLarge, 'L')));
    shutdown(large.get(), SHUT_WR);
  });
  // Let the large transfer fill the link (and every buffer on the way) first.
  const Clock::time_point large_start = Clock::now();
  while (large_received.load() < 100'000 && SecondsSince(large_start) < 5) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_GE(large_received.load(), 100'000u);

  Fd small(ConnectTo((*proxy)->port()));
  ASSERT_GE(small.get(), 0);
  const Clock::time_point sent = Clock::now();
  ASSERT_TRUE(SendAll(small.get(), std::string(kSmall, 'S')));
  std::future<Clock::time_point> arrived = small_arrived.get_future();
  ASSERT_EQ(arrived.wait_for(std::chrono::seconds(10)), std::future_status::ready);
  const double latency = std::chrono::duration<double>(arrived.get() - sent).count();
  EXPECT_LT(latency, 0.5);
  EXPECT_LT(large_received.load(), kLarge) << "the large transfer was over: nothing was shared";

  // Open the link up: the rest of the large transfer goes at once.
  (*proxy)->set_rate(1e9);
  writer.join();
  const Clock::time_point fast_start = Clock::now();
  while (large_received.load() < kLarge && SecondsSince(fast_start) < 5) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(large_received.load(), kLarge);
  EXPECT_LT(SecondsSince(fast_start), 2.0);
}

TEST(ThrottleProxyTest, IdleProxySleeps) {
  TestServer server([](int fd) { RecvAll(fd); });
  absl::StatusOr<std::unique_ptr<ThrottleProxy>> proxy = ThrottleProxy::Start(server.port(), 1e6);
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  Fd client(ConnectTo((*proxy)->port()));
  ASSERT_GE(client.get(), 0);
  ASSERT_TRUE(SendAll(client.get(), "hello"));
  const double cpu_start = ProcessCpuSeconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_LT(ProcessCpuSeconds() - cpu_start, 0.05);
}

TEST(ThrottleProxyTest, ClosesClientWhenUpstreamRefuses) {
  int unused_port = 0;
  {
    // A port nobody listens on: bound, then closed.
    Fd probe(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    sockaddr_in addr = Loopback(0);
    socklen_t len = sizeof(addr);
    ASSERT_EQ(bind(probe.get(), reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    ASSERT_EQ(getsockname(probe.get(), reinterpret_cast<sockaddr*>(&addr), &len), 0);
    unused_port = ntohs(addr.sin_port);
  }
  absl::StatusOr<std::unique_ptr<ThrottleProxy>> proxy = ThrottleProxy::Start(unused_port, 1e6);
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  Fd client(ConnectTo((*proxy)->port()));
  ASSERT_GE(client.get(), 0);
  EXPECT_TRUE(ClosedWithin(client.get(), 2000));
}

TEST(ThrottleProxyTest, DestructorDropsConnections) {
  TestServer server([](int fd) { RecvAll(fd); });
  absl::StatusOr<std::unique_ptr<ThrottleProxy>> proxy = ThrottleProxy::Start(server.port(), 1e6);
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  Fd client(ConnectTo((*proxy)->port()));
  ASSERT_GE(client.get(), 0);
  ASSERT_TRUE(SendAll(client.get(), "hello"));
  EXPECT_FALSE(ClosedWithin(client.get(), 100));
  proxy->reset();
  EXPECT_TRUE(ClosedWithin(client.get(), 2000));
}

// An armed cut passes exactly its bytes upstream, then drops the connection; a new one is
// accepted and forwarded as before. What the server received is read once its handlers are
// joined, in either order: the client sees the cut from the proxy, not from the server, whose
// accept loop may take both connections at once and run their handlers in either order (CI
// once read before the first had finished and saw one of two).
TEST(ThrottleProxyTest, ACutDropsEveryConnectionOnceItsBytesPassed) {
  std::mutex mu;
  std::vector<std::string> received;
  std::optional<TestServer> server;
  server.emplace([&](int fd) {
    const std::string got = RecvAll(fd);
    std::lock_guard<std::mutex> lock(mu);
    received.push_back(got);
  });
  absl::StatusOr<std::unique_ptr<ThrottleProxy>> proxy = ThrottleProxy::Start(server->port(), 20e6);
  ASSERT_TRUE(proxy.ok()) << proxy.status();
  (*proxy)->CutAfter(1000);
  Fd client(ConnectTo((*proxy)->port()));
  ASSERT_GE(client.get(), 0);
  const std::string sent = RandomBytes(5000, 3);
  ASSERT_TRUE(SendAll(client.get(), sent));
  EXPECT_TRUE(ClosedWithin(client.get(), 2000));
  EXPECT_EQ((*proxy)->cuts(), 1u);
  EXPECT_EQ((*proxy)->bytes_upstream(), 1000u);
  Fd again(ConnectTo((*proxy)->port()));
  ASSERT_GE(again.get(), 0);
  ASSERT_TRUE(SendAll(again.get(), "after"));
  shutdown(again.get(), SHUT_WR);
  EXPECT_TRUE(ClosedWithin(again.get(), 2000)) << "upstream closes after our EOF";
  EXPECT_EQ((*proxy)->bytes_upstream(), 1005u);
  proxy->reset();
  server.reset();  // joins its handlers
  std::lock_guard<std::mutex> lock(mu);
  ASSERT_EQ(received.size(), 2u);
  if (received[0] == "after") std::swap(received[0], received[1]);
  EXPECT_EQ(received[0], sent.substr(0, 1000));
  EXPECT_EQ(received[1], "after");
}

}  // namespace
}  // namespace diloco::testing
