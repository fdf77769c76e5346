// ThrottleProxy: a rate-limited TCP proxy on 127.0.0.1 that imitates a slow shared WAN link for
// multi-process tests (e.g. workers syncing with a diloco-server over ZeroMQ at a few MB/s).
//
// Every connection accepted on port() is forwarded to 127.0.0.1:upstream_port. All connections
// share one byte budget per direction (a token bucket refilled at bytes_per_second), served
// round-robin in chunks of at most chunk_bytes: like TCP flows sharing a link, a small message on
// one connection is not held behind a large transfer on another (fair queuing), and a single
// connection alone gets the whole rate. Bytes wait in the proxy, not in an unbounded queue: a
// direction reads more only once what it read before has been written on, so back-pressure
// reaches the sender as on a real link. Half-closes (shutdown(SHUT_WR)) are passed on; an error
// on either side closes both sides of that connection.
//
// A cut imitates a link that drops: once armed (CutAfter), the proxy closes every connection it
// holds as soon as the given number of further bytes went upstream (client -> upstream), and
// accepts new ones as before, as a home router that resyncs does.
//
// One background thread poll()s every socket; it sleeps in poll() when idle and wakes at least
// every millisecond while a bucket is empty. Destroying the proxy stops the thread and closes
// every socket it holds (its clients see the connection drop).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"

namespace diloco::testing {

class ThrottleProxy {
 public:
  // Listens on 127.0.0.1 at a port picked by the kernel and starts forwarding. `bytes_per_second`
  // applies to each direction separately and must be > 0; `chunk_bytes` (> 0) is the most one
  // connection moves per direction before the others get their turn.
  static absl::StatusOr<std::unique_ptr<ThrottleProxy>> Start(int upstream_port,
                                                              double bytes_per_second,
                                                              size_t chunk_bytes = 4096);
  ~ThrottleProxy();  // stops the thread, closes every socket
  ThrottleProxy(const ThrottleProxy&) = delete;
  ThrottleProxy& operator=(const ThrottleProxy&) = delete;

  int port() const { return port_; }
  std::string endpoint() const;  // "tcp://127.0.0.1:PORT"
  // Bytes written on to their destination, both directions together, and upstream alone.
  uint64_t bytes_forwarded() const { return bytes_forwarded_.load(std::memory_order_relaxed); }
  uint64_t bytes_upstream() const { return bytes_upstream_.load(std::memory_order_relaxed); }
  // Closes every connection once `bytes` more have been written upstream (once). May be called
  // from any thread; arm one cut at a time.
  void CutAfter(uint64_t bytes);
  uint64_t cuts() const { return cuts_.load(std::memory_order_relaxed); }  // cuts made
  // Changes the rate of both directions; may be called from any thread while running. A rate
  // <= 0 is ignored.
  void set_rate(double bytes_per_second);

 private:
  struct Connection;

  ThrottleProxy(int listen_fd, int port, int wake_read_fd, int wake_write_fd, int upstream_port,
                double bytes_per_second, size_t chunk_bytes);
  void Wake();
  void Run();
  void Accept();
  // Moves at most one chunk in direction `dir` (0: client -> upstream, 1: back) of `c`; returns
  // whether it read one (which counts as the connection's turn).
  bool Transfer(Connection& c, int dir, double& tokens);
  bool Flush(Connection& c, int dir);  // false on a write error

  const int listen_fd_;
  const int port_;
  const int wake_read_fd_;
  const int wake_write_fd_;
  const int upstream_port_;
  const size_t chunk_bytes_;
  std::atomic<double> rate_;
  std::atomic<uint64_t> bytes_forwarded_{0};
  std::atomic<uint64_t> bytes_upstream_{0};
  // The cut: armed while >= 0, the upstream bytes still to pass before it.
  std::atomic<int64_t> cut_left_{-1};
  std::atomic<uint64_t> cuts_{0};
  std::atomic<bool> stop_{false};
  std::vector<std::unique_ptr<Connection>> connections_;  // only the thread touches these
  size_t next_[2] = {0, 0};                               // round-robin position per direction
  std::thread thread_;
};

}  // namespace diloco::testing
