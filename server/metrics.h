// Operator-facing views of a shard: the human progress line and the Prometheus text exposition
// (served by MetricsHttpServer on its own thread from a snapshot, so scrapes never touch the
// shard's state or its I/O thread). Both are made from the counter table (counter_table.h) and
// a few facts about the shard, so a counter added there appears in each.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "server/shard.h"

namespace diloco::server {

// What the views show beside the counters.
struct ShardFacts {
  uint32_t shard = 0;
  std::vector<std::pair<uint32_t, uint64_t>> versions;  // owned fragment, published version
  uint32_t live_workers = 0;
  std::vector<LearnerRow> learners;  // the live workers' last figures (server/worker_table.h)
};
ShardFacts FactsOf(const Shard& shard);

// One line for a person, e.g.
//   shard 0 | live workers 2 | versions 0:7 1:7 | rounds 7 | pushes 14 dup 0 stale 1 bad 0 |
//   in 1.2MiB out 2.3MiB | checkpoints 3
// (one line; rows shown only when nonzero join it as they happen).
std::string ProgressText(const ShardCounters& c, const ShardFacts& facts);
std::string PrometheusText(const ShardCounters& c, const ShardFacts& facts);

// The views of a live shard: its counters and FactsOf(shard).
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
