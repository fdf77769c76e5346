// The loopback part of diloco-bench-server (loopback.cc): which rows it runs.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

struct LoopbackOptions {
  std::string model;
  uint32_t fragments = 8;
  double seconds = 2.0;
  double memcpy_gbps = 0;  // the run's memcpy ceiling, for the memcpy column
  // (push codec, download codec) pairs, e.g. {"int8:256", "int8:256"}.
  std::vector<std::pair<std::string, std::string>> codecs = {
      {"int8:256", "int8:256"}, {"int8:256", "fp32"}, {"int4:256", "int4:256"}};
  std::vector<uint32_t> shards = {1, 2, 4};
  std::vector<uint32_t> workers = {1, 4, 8};
};

// Runs every (codecs, shards, workers) row against its raw ZeroMQ echo peer; 0 on success.
int Loopback(const LoopbackOptions& o);
