// Operator-facing views of a shard: the human progress line, the JSON-lines event, and the
// Prometheus text exposition (served by MetricsHttpServer on its own thread from a snapshot,
// so scrapes never touch the shard's state or its I/O thread).
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "absl/status/statusor.h"
#include "server/shard.h"

namespace diloco::server {

std::string ProgressLine(const Shard& shard);
std::string PrometheusText(const Shard& shard);

// Serves GET /metrics with the last published snapshot on 127.0.0.1-or-given address:port.
class MetricsHttpServer {
 public:
  // "host:port"; port 0 picks a free one (see port()).
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const std::string& address);
  ~MetricsHttpServer();
  void Publish(std::string text);
  int port() const { return port_; }

 private:
  struct Impl;
  explicit MetricsHttpServer(std::unique_ptr<Impl> impl, int port);
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace diloco::server
