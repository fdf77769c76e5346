// The shard's counters, each named once for every view that shows it: its key in the Stats JSON
// and its Prometheus name and help. Shard::StatsJson and PrometheusText both walk these rows, so
// a counter added here appears in both (tests/server/metrics_test.cc checks every row in both,
// with its value). Gauges, histograms and per-fragment or per-reason figures are written by
// each view; the progress line picks what a person wants to read.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "server/shard.h"

namespace diloco::server {

struct CounterRow {
  const char* json;        // Stats JSON key
  const char* prometheus;  // Prometheus counter name (a _total)
  const char* help;
  uint64_t ShardCounters::*field;
};

// Counters of their own.
std::span<const CounterRow> CounterRows();
// Pushes by outcome: the Stats JSON's "pushes" object and diloco_pushes_total{outcome=json}.
std::span<const CounterRow> PushOutcomeRows();

// The rows as JSON object members: "rounds":3,...,"pushes":{"queued":5,...} (no braces).
std::string CounterJsonMembers(const ShardCounters& c);

}  // namespace diloco::server
