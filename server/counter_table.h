// The shard's counters, each named once for every view that shows it: its key in the Stats JSON,
// its Prometheus name and help, and its place in the progress line. Shard::StatsJson,
// PrometheusText and ProgressText (server/metrics.h) all walk these rows, so a counter added
// here appears in all three (tests/server/metrics_test.cc checks every row in every view, with
// its value). Gauges, histograms and per-fragment or per-reason figures are written by each
// view.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <span>
#include <string>

#include "server/shard.h"

namespace diloco::server {

struct CounterRow {
  // How the progress line shows a row: always, or only while it is not zero (rare events).
  enum Show { kAlways, kNonzero };
  enum Unit { kCount, kBytes };  // kBytes: 1.5MiB
  // Text the progress line adds after the row's value.
  enum Detail {
    kNoDetail,
    kRefusalReasons,   // " (BadIdentity 3, NoCredit 1)"
    kCheckpointError,  // " FAILING: <cause>" while checkpoint writes fail
  };

  const char* json;        // Stats JSON key
  const char* prometheus;  // Prometheus counter name (a _total)
  const char* help;
  uint64_t ShardCounters::*field;
  // The progress line: the row's text with "{}" for its value, e.g. "dup {}". Rows are shown
  // by `group` (a " | " between groups), in table order within one, push outcomes first.
  const char* progress;
  int group;
  Show show = kAlways;
  Unit unit = kCount;
  Detail detail = kNoDetail;
};

// Counters of their own.
std::span<const CounterRow> CounterRows();
// Pushes by outcome: the Stats JSON's "pushes" object and diloco_pushes_total{outcome=json}.
std::span<const CounterRow> PushOutcomeRows();

// The rows as a JSON object: {"rounds":3,...,"pushes":{"queued":5,...}}.
nlohmann::ordered_json CounterJson(const ShardCounters& c);

}  // namespace diloco::server
