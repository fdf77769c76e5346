#include "tests/util/throttle_proxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace diloco::testing {
namespace {

constexpr int kIdleTimeoutMs = 100;  // poll() timeout with nothing to wait for but sockets
constexpr double kBurstSeconds = 0.05;

absl::Status ErrnoError(const char* what) {
  const int e = errno;
  return absl::Status(absl::ErrnoToStatusCode(e),
                      absl::StrCat("ThrottleProxy: ", what, ": ", std::strerror(e)));
}

sockaddr_in Loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return addr;
}

void SetNoDelay(int fd) {
  const int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

}  // namespace

// One accepted connection: fd[0] is the client's side, fd[1] the upstream side. Direction d reads
// from fd[d] and writes to fd[1 - d].
struct ThrottleProxy::Connection {
  struct Direction {
    std::vector<char> buffer;
    size_t begin = 0;  // buffer[begin, end) is read but not yet written on
    size_t end = 0;
    bool eof = false;  // fd[d] reported EOF; fd[1 - d] has been shut down for writing
  };

  Connection(int client_fd, int upstream_fd, size_t chunk_bytes) : fd{client_fd, upstream_fd} {
    for (Direction& d : dir) d.buffer.resize(chunk_bytes);
  }
  ~Connection() {
    for (int f : fd) close(f);
  }

  int fd[2];
  bool connecting = true;  // non-blocking connect() to upstream still in progress
  bool dead = false;       // to be closed at the end of this pass
  Direction dir[2];
};

absl::StatusOr<std::unique_ptr<ThrottleProxy>> ThrottleProxy::Start(int upstream_port,
                                                                    double bytes_per_second,
                                                                    size_t chunk_bytes) {
  if (!(bytes_per_second > 0) || chunk_bytes == 0 || upstream_port <= 0 || upstream_port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("ThrottleProxy: bad arguments: upstream_port=", upstream_port,
                     " bytes_per_second=", bytes_per_second, " chunk_bytes=", chunk_bytes));
  }
  const int listen_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (listen_fd < 0) return ErrnoError("socket");
  const int one = 1;
  setsockopt(listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr = Loopback(0);
  socklen_t len = sizeof(addr);
  if (bind(listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      listen(listen_fd, SOMAXCONN) != 0 ||
      getsockname(listen_fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    absl::Status status = ErrnoError("bind/listen");
    close(listen_fd);
    return status;
  }
  int wake[2];
  if (pipe2(wake, O_NONBLOCK | O_CLOEXEC) != 0) {
    absl::Status status = ErrnoError("pipe2");
    close(listen_fd);
    return status;
  }
  return std::unique_ptr<ThrottleProxy>(new ThrottleProxy(listen_fd, ntohs(addr.sin_port), wake[0],
                                                          wake[1], upstream_port, bytes_per_second,
                                                          chunk_bytes));
}

ThrottleProxy::ThrottleProxy(int listen_fd, int port, int wake_read_fd, int wake_write_fd,
                             int upstream_port, double bytes_per_second, size_t chunk_bytes)
    : listen_fd_(listen_fd),
      port_(port),
      wake_read_fd_(wake_read_fd),
      wake_write_fd_(wake_write_fd),
      upstream_port_(upstream_port),
      chunk_bytes_(chunk_bytes),
      rate_(bytes_per_second),
      thread_([this] { Run(); }) {}

ThrottleProxy::~ThrottleProxy() {
  stop_.store(true);
  Wake();
  thread_.join();
  connections_.clear();
  close(listen_fd_);
  close(wake_read_fd_);
  close(wake_write_fd_);
}

std::string ThrottleProxy::endpoint() const { return absl::StrCat("tcp://127.0.0.1:", port_); }

void ThrottleProxy::set_rate(double bytes_per_second) {
  if (!(bytes_per_second > 0)) return;
  rate_.store(bytes_per_second);
  Wake();
}

void ThrottleProxy::CutAfter(uint64_t bytes) {
  cut_left_.store(static_cast<int64_t>(bytes));
  Wake();
}

void ThrottleProxy::Wake() {
  const char byte = 0;
  if (write(wake_write_fd_, &byte, 1) < 0) {
    // The pipe is full: the thread is woken already.
  }
}

void ThrottleProxy::Run() {
  using Clock = std::chrono::steady_clock;
  double tokens[2] = {0, 0};
  Clock::time_point last = Clock::now();
  std::vector<pollfd> fds;
  while (!stop_.load()) {
    // Refill both buckets for the time since the last pass.
    const double rate = rate_.load();
    const Clock::time_point now = Clock::now();
    const double burst = std::max(static_cast<double>(chunk_bytes_), rate * kBurstSeconds);
    for (double& t : tokens) {
      t = std::min(burst, t + rate * std::chrono::duration<double>(now - last).count());
    }
    last = now;

    // Each direction: visit the connections round-robin from the one after the last served, each
    // moving at most one chunk while the bucket has tokens. A read may take the bucket below zero
    // (by less than a chunk); the debt is paid off before the next read.
    for (int d = 0; d < 2; ++d) {
      const size_t n = connections_.size();
      for (size_t k = 0; k < n; ++k) {
        const size_t i = (next_[d] + k) % n;
        if (Transfer(*connections_[i], d, tokens[d])) next_[d] = (i + 1) % n;
      }
    }
    if (cut_left_.load() == 0) {  // the armed cut's bytes have passed: drop every connection
      cut_left_.store(-1);
      cuts_.fetch_add(1);
      for (const std::unique_ptr<Connection>& c : connections_) c->dead = true;
    }
    std::erase_if(connections_, [](const std::unique_ptr<Connection>& c) { return c->dead; });

    // Wait for what each direction needs: readable input while the bucket has tokens, writable
    // output while bytes are buffered. A socket with nothing to wait for is left out (fd -1), so
    // that an error or hang-up on it cannot make poll() return at once over and over.
    int timeout_ms = kIdleTimeoutMs;
    fds.clear();
    fds.push_back({wake_read_fd_, POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (const std::unique_ptr<Connection>& c : connections_) {
      short events[2] = {0, 0};
      if (c->connecting) {
        events[1] = POLLOUT;
      } else {
        for (int d = 0; d < 2; ++d) {
          const Connection::Direction& x = c->dir[d];
          if (x.begin < x.end) {
            events[1 - d] |= POLLOUT;
          } else if (!x.eof && tokens[d] > 0) {
            events[d] |= POLLIN;
          } else if (!x.eof) {
            const double wait_ms = std::ceil(-tokens[d] / rate * 1000.0);
            timeout_ms = std::clamp(static_cast<int>(std::min(wait_ms, 1e6)), 1, timeout_ms);
          }
        }
      }
      for (int s = 0; s < 2; ++s) fds.push_back({events[s] ? c->fd[s] : -1, events[s], 0});
    }
    if (poll(fds.data(), fds.size(), timeout_ms) < 0 && errno != EINTR) break;

    if (fds[0].revents) {
      char drain[64];
      while (read(wake_read_fd_, drain, sizeof(drain)) > 0) {
      }
    }
    // Finish the upstream connects that poll() reported on (before Accept() adds connections).
    for (size_t i = 0; i < connections_.size(); ++i) {
      Connection& c = *connections_[i];
      if (!c.connecting || fds[3 + 2 * i].revents == 0) continue;
      int error = 0;
      socklen_t len = sizeof(error);
      if (getsockopt(c.fd[1], SOL_SOCKET, SO_ERROR, &error, &len) != 0 || error != 0) {
        c.dead = true;
      } else {
        c.connecting = false;
      }
    }
    if (fds[1].revents) Accept();
  }
}

void ThrottleProxy::Accept() {
  while (true) {
    const int client_fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (client_fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;  // EAGAIN: no more pending
    }
    const int upstream_fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (upstream_fd < 0) {
      close(client_fd);
      continue;
    }
    SetNoDelay(client_fd);
    SetNoDelay(upstream_fd);
    auto c = std::make_unique<Connection>(client_fd, upstream_fd, chunk_bytes_);
    const sockaddr_in addr = Loopback(upstream_port_);
    if (connect(upstream_fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) {
      c->connecting = false;
    } else if (errno != EINPROGRESS) {
      continue;  // upstream refused: closing `c` drops the client
    }
    connections_.push_back(std::move(c));
  }
}

bool ThrottleProxy::Flush(Connection& c, int dir) {
  Connection::Direction& x = c.dir[dir];
  while (x.begin < x.end) {
    const ssize_t n = send(c.fd[1 - dir], x.buffer.data() + x.begin, x.end - x.begin, MSG_NOSIGNAL);
    if (n > 0) {
      x.begin += static_cast<size_t>(n);
      bytes_forwarded_.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
      if (dir == 0) {
        bytes_upstream_.fetch_add(static_cast<uint64_t>(n), std::memory_order_relaxed);
        int64_t left = cut_left_.load();
        while (left > 0 && !cut_left_.compare_exchange_weak(left, std::max<int64_t>(left - n, 0))) {
        }
      }
    } else if (n < 0 && errno != EINTR) {
      return errno == EAGAIN || errno == EWOULDBLOCK;
    }
  }
  x.begin = x.end = 0;
  return true;
}

bool ThrottleProxy::Transfer(Connection& c, int dir, double& tokens) {
  Connection::Direction& x = c.dir[dir];
  if (c.dead || c.connecting || x.eof) return false;
  if (x.begin < x.end) {  // already paid for: only waits for the destination
    if (!Flush(c, dir)) c.dead = true;
    return false;
  }
  if (tokens <= 0) return false;
  // An armed cut passes no byte beyond it: the connection ends there, mid-message.
  size_t want = x.buffer.size();
  if (const int64_t left = cut_left_.load(); dir == 0 && left >= 0)
    want = std::min<size_t>(want, static_cast<size_t>(left));
  if (want == 0) return false;
  const ssize_t n = recv(c.fd[dir], x.buffer.data(), want, 0);
  if (n > 0) {
    tokens -= static_cast<double>(n);
    x.end = static_cast<size_t>(n);
    if (!Flush(c, dir)) c.dead = true;
    return true;
  }
  if (n == 0) {  // half-close: pass it on; both halves closed ends the connection
    x.eof = true;
    shutdown(c.fd[1 - dir], SHUT_WR);
    if (c.dir[1 - dir].eof) c.dead = true;
  } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
    c.dead = true;  // ECONNRESET and the like
  }
  return false;
}

}  // namespace diloco::testing
