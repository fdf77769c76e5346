// Part 4 of diloco-bench-server (--at_size=1): real diloco-server processes at model size
// (GPT-2 124M on one shard; a 1.0B-parameter model on 4 shards when the machine has the
// memory), fed by one synthetic pusher (tests/integration/synthetic_pusher.h: int8 deltas,
// every fragment pushed in turn, each Applied answer awaited), in each durability mode with a
// store. Per run it prints:
//   rounds/s          closed rounds (one fragment each) per second, over --seconds of pushing;
//   wire B/param      bytes on the wire per parameter per round: the encoded push in, the fp32
//                     Applied update out;
//   ckpt MB/s         tensor bytes the shards checkpointed over the time inside
//                     CheckpointStore::Write (Stats), beside a synced sequential write of
//                     the same size of file in the same directory measured in the same run
//                     (the ceiling) and the ratio;
//   resident B/param  the shards' VmRSS at steady state (pushes stopped) over their parameters,
//                     and VmHWM, beside the 12.5 bound.
// The 1B model needs ~8 GB of shard state plus copies in flight: skipped, with the reason
// printed, when MemAvailable is under 14 GiB.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "benchmarks/server/spawn.h"
#include "schema/transport.h"
#include "common/process_memory.h"
#include "tests/integration/synthetic_pusher.h"

namespace {

using namespace diloco;

constexpr double kBound = 12.5;

std::string ReadLine(const std::filesystem::path& p, absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  while (absl::Now() < end) {
    std::ifstream in(p);
    std::string line;
    if (in && std::getline(in, line) && !line.empty()) return line;
    absl::SleepFor(absl::Milliseconds(25));
  }
  return "";
}

double MemAvailableGiB() {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);)
    if (line.starts_with("MemAvailable:")) {
      double kb = 0;
      (void)absl::SimpleAtod(absl::StripAsciiWhitespace(line.substr(13, line.size() - 16)), &kb);
      return kb / (1 << 20);
    }
  return 0;
}

// MB/s of writing `bytes` sequentially to a fresh file in `dir` in 8 MiB writes, then fsync.
double SyncedWriteMBps(const std::filesystem::path& dir, uint64_t bytes) {
  const auto path = dir / "ceiling.bin";
  std::vector<char> buf(8 << 20, 1);
  const auto t0 = std::chrono::steady_clock::now();
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) return 0;
  for (uint64_t done = 0; done < bytes; done += buf.size())
    if (::write(fd, buf.data(), buf.size()) < 0) break;
  ::fsync(fd);
  ::close(fd);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::filesystem::remove(path);
  return bytes / s / 1e6;
}

double StatNumber(const std::string& endpoint, const std::string& key) {
  auto s = wire::RequestStats(endpoint, absl::Seconds(10));
  if (!s.ok()) return -1;
  const std::string k = absl::StrCat("\"", key, "\":");
  auto p = s->find(k);
  double v = -1;
  if (p != std::string::npos) {
    const auto e = s->find_first_of(",}", p + k.size());
    (void)absl::SimpleAtod(s->substr(p + k.size(), e - p - k.size()), &v);
  }
  return v;
}

struct Config {
  std::string name, model;
  uint32_t shards, fragments;
};

void Run(const Config& c, const std::string& durability, double seconds) {
  const auto dir =
      std::filesystem::temp_directory_path() / absl::StrCat("diloco-bench-at-size-", ::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::vector<pid_t> pids;
  std::vector<std::string> eps;
  for (uint32_t s = 0; s < c.shards; ++s)
    pids.push_back(
        bench::Spawn({DILOCO_SERVER_BINARY, "--bind=tcp://127.0.0.1:*",
                      absl::StrCat("--port_file=", (dir / absl::StrCat("p", s)).string()),
                      absl::StrCat("--shard=", s), absl::StrCat("--shards=", c.shards),
                      absl::StrCat("--fragments=", c.fragments), "--model=" + c.model,
                      absl::StrCat("--store=", (dir / absl::StrCat("store", s)).string()),
                      "--durability=" + durability, "--quorum=1", "--worker_timeout=60s",
                      "--progress_interval=1000s"},
                     (dir / "server.log").string()));
  for (uint32_t s = 0; s < c.shards; ++s)
    eps.push_back(ReadLine(dir / absl::StrCat("p", s), absl::Seconds(60)));
  auto stop = [&] {
    for (pid_t p : pids) {
      ::kill(p, SIGTERM);
      ::waitpid(p, nullptr, 0);
    }
    std::filesystem::remove_all(dir);
  };
  auto pusher =
      testing::SyntheticPusher::Create(eps, c.model, c.fragments, *kernels::ParseCodec("int8:256"));
  if (!pusher.ok() || !(*pusher)->InitAll().ok()) {
    std::printf("%-10s %-10s failed to start: %s\n", c.name.c_str(), durability.c_str(),
                pusher.ok() ? "InitFragment not answered" : pusher.status().ToString().c_str());
    return stop();
  }
  auto& p = **pusher;
  double ckpt_bytes0 = 0, ckpt_ms0 = 0;
  for (const auto& ep : eps) {
    ckpt_bytes0 += StatNumber(ep, "checkpoint_bytes");
    ckpt_ms0 += StatNumber(ep, "checkpoint_ms");
  }
  const uint64_t a0 = p.pushes_applied();
  const absl::Time t0 = absl::Now();
  std::string error;
  while (absl::Now() - t0 < absl::Seconds(seconds) && error.empty())
    if (auto s = p.PushAll(); !s.ok()) error = s.ToString();
  const double dt = absl::ToDoubleSeconds(absl::Now() - t0);
  const uint64_t rounds = p.pushes_applied() - a0;
  double ckpt_bytes = 0, ckpt_ms = 0, bad = 0, refused = 0, rss = 0, hwm = 0, params = 0;
  for (uint32_t s = 0; s < c.shards; ++s) {
    ckpt_bytes += StatNumber(eps[s], "checkpoint_bytes");
    ckpt_ms += StatNumber(eps[s], "checkpoint_ms");
    bad += StatNumber(eps[s], "bad_messages");
    refused += StatNumber(eps[s], "refused") + StatNumber(eps[s], "no_credit");
    params += StatNumber(eps[s], "params");
    auto m = ReadProcessMemory(pids[s]);
    if (m.ok()) {
      rss = std::max(rss, m->resident_bytes / StatNumber(eps[s], "params"));
      hwm = std::max(hwm, m->peak_resident_bytes / StatNumber(eps[s], "params"));
    }
  }
  ckpt_bytes -= ckpt_bytes0;
  ckpt_ms -= ckpt_ms0;
  const double ckpt_mbps = ckpt_ms > 0 ? ckpt_bytes / (ckpt_ms / 1e3) / 1e6 : 0;
  // The ceiling: one file of a shard's checkpoint size (its params + momentum), capped at 2 GiB.
  const double ceiling = SyncedWriteMBps(
      dir, std::min<uint64_t>(static_cast<uint64_t>(8 * params / c.shards), uint64_t{2} << 30));
  const double wire_bpp = p.push_bytes_per_param() + 4.0;
  std::printf("%-10s %-10s %8.2f %10.2f %10.1f %10.1f %6.2f %10.2f %8.2f %6.1f %4.0f %4.0f%s%s\n",
              c.name.c_str(), durability.c_str(), rounds / dt, wire_bpp, ckpt_mbps, ceiling,
              ceiling > 0 ? ckpt_mbps / ceiling : 0, rss, hwm, kBound, bad, refused,
              error.empty() ? "" : "  error: ", error.c_str());
  stop();
}

}  // namespace

int AtSize(double seconds) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // each run's line survives a later failure
  std::printf("\n== at size (diloco-server processes with a store, one synthetic pusher, int8)\n");
  std::printf("%-10s %-10s %8s %10s %10s %10s %6s %10s %8s %6s %4s %4s\n", "model", "durability",
              "rounds/s", "wire B/p", "ckpt MB/s", "ceil MB/s", "ratio", "rss B/p", "hwm B/p",
              "bound", "bad", "ref");
  const std::vector<Config> configs = {
      {"124M", "gpt2-124m", 1, 8},
      {"1.0B", "L=18,H=16,C=2048,T=1024,V=50257", 4, 16},
  };
  for (const auto& c : configs) {
    if (c.name == "1.0B") {
      const double avail = MemAvailableGiB();
      if (avail < 14) {
        std::printf("%-10s skipped: %.1f GiB available, the 1B runs need 14\n", c.name.c_str(),
                    avail);
        continue;
      }
    }
    for (const char* d : {"periodic", "per-round"}) {
      try {
        Run(c, d, seconds);
      } catch (const zmq::error_t& e) {
        std::printf("%-10s %-10s failed: ZeroMQ error %d (%s)\n", c.name.c_str(), d, e.num(),
                    e.what());
      }
    }
  }
  return 0;
}
