// diloco-bench-checksum: what verifying a received frame costs the receiving thread. A shard or
// worker reads every payload byte once, to check its XXH3 sum (schema/message.cc), from memory
// that libzmq's I/O thread has just written on another core. Three states of that memory:
//   hot    the same frame again and again (in this core's cache): the arithmetic alone;
//   fresh  a frame a thread on another CPU has just written (what the receive path sees);
//   cold   frames cycled through a pool far larger than the caches (a receiver that lags).
// Ceiling: the read bandwidth of the same memory in the same state, measured in the same run
// by a plain vectorised 64-bit sum (memory can deliver no faster than that), and memcpy for
// scale. ratio = checksum / read. CPU seconds per GiB (1 / GB/s, scaled) is what the transport
// bench's rx column adds up. Then the header section (header_check.cc): ns per header frame for
// its checksum trailer against the FlatBuffers verifier it precedes.
#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "common/checksum.h"

ABSL_FLAG(std::string, frames_kib, "1024,4096", "frame sizes in KiB (int8 and fp32 chunks)");
ABSL_FLAG(uint64_t, pool_mib, 1024, "memory cycled through for the cold state");
ABSL_FLAG(uint64_t, bytes_mib, 2048, "bytes read per measurement");
ABSL_FLAG(int, reps, 3, "runs per cell; the best is reported");
ABSL_FLAG(bool, payloads, true, "the payload frame section");
ABSL_FLAG(uint64_t, header_iters, 10000, "header checks per run (0: no header section)");
ABSL_FLAG(int, header_reps, 300, "runs per header cell; the best is reported");

namespace diloco::bench {
void ReportHeaderChecks(int reps, uint64_t iters);  // header_check.cc
}  // namespace diloco::bench

namespace {

using Clock = std::chrono::steady_clock;

// The read ceiling: sums 64-bit words in sixteen independent lanes, which the compiler turns
// into the widest vector adds of the target it is inlined into; no loop reads memory faster.
[[gnu::always_inline]] inline uint64_t ReadSumBody(const void* data, size_t size) {
  const auto* w = static_cast<const uint64_t*>(data);
  uint64_t acc[16] = {};
  for (size_t i = 0; i + 16 <= size / 8; i += 16)
    for (int k = 0; k < 16; ++k) acc[k] += w[i + k];
  uint64_t s = 0;
  for (uint64_t a : acc) s += a;
  return s;
}
uint64_t ReadSum(const void* data, size_t size) { return ReadSumBody(data, size); }
[[gnu::target("avx2")]] uint64_t ReadSumAvx2(const void* data, size_t size) {
  return ReadSumBody(data, size);
}
[[gnu::target("avx512f")]] uint64_t ReadSumAvx512(const void* data, size_t size) {
  return ReadSumBody(data, size);
}

uint64_t Copy(const void* data, size_t size) {
  static std::vector<uint8_t> dst;
  if (dst.size() < size) dst.assign(size, 0);
  std::memcpy(dst.data(), data, size);
  return dst[size / 2];
}

using Fn = std::function<uint64_t(const void*, size_t)>;
enum class State { kHot, kFresh, kCold };

// Pins the calling thread to one CPU; false where that is not possible.
bool PinTo(int cpu) {
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof(set), &set) == 0;
}

// A thread on another CPU than the reader's that writes frames on request, as libzmq's I/O
// thread writes each received frame.
class Writer {
 public:
  Writer(int cpu) : thread_([this, cpu] { Loop(cpu); }) {}
  ~Writer() {
    {
      std::lock_guard<std::mutex> l(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }
  void Fill(uint8_t* p, size_t n, int value) {
    std::unique_lock<std::mutex> l(mu_);
    job_ = {p, n, value};
    pending_ = true;
    cv_.notify_all();
    cv_.wait(l, [this] { return !pending_; });
  }

 private:
  struct Job {
    uint8_t* p = nullptr;
    size_t n = 0;
    int value = 0;
  };
  void Loop(int cpu) {
    PinTo(cpu);
    std::unique_lock<std::mutex> l(mu_);
    while (true) {
      cv_.wait(l, [this] { return pending_ || stop_; });
      if (stop_) return;
      std::memset(job_.p, job_.value, job_.n);
      pending_ = false;
      cv_.notify_all();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  Job job_;
  bool pending_ = false, stop_ = false;
  std::thread thread_;
};

// GB/s of `fn` over `total` bytes of frames of `frame` bytes in the given state; best of reps.
double Rate(const Fn& fn, State state, size_t frame, std::vector<uint8_t>& pool, size_t total,
            int reps, Writer& writer) {
  volatile uint64_t sink = 0;
  double best = 0;
  const size_t frames = std::max<size_t>(1, total / frame);
  for (int r = 0; r < reps; ++r) {
    double seconds = 0;
    if (state == State::kFresh) {
      // The writer (pinned to another CPU) fills a frame, then this thread reads it: timed, the
      // read alone. Fewer frames, as each costs a hand-off outside the timing.
      const size_t n = std::min<size_t>(frames, 64);
      for (size_t i = 0; i < n; ++i) {
        uint8_t* f = pool.data() + (i * frame) % (pool.size() - frame + 1);
        writer.Fill(f, frame, static_cast<int>(i));
        const auto t0 = Clock::now();
        sink = sink + fn(f, frame);
        seconds += std::chrono::duration<double>(Clock::now() - t0).count();
      }
      best = std::max(best, n * frame / seconds / 1e9);
      continue;
    }
    const auto t0 = Clock::now();
    for (size_t i = 0; i < frames; ++i) {
      const size_t off = state == State::kHot ? 0 : (i * frame) % (pool.size() - frame + 1);
      sink = sink + fn(pool.data() + off, frame);
    }
    seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    best = std::max(best, frames * frame / seconds / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  std::vector<size_t> frames;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_frames_kib), ',')) {
    uint64_t v = 0;
    if (!absl::SimpleAtoi(s, &v) || v == 0) {
      std::fprintf(stderr, "bad --frames_kib: %s\n", std::string(s).c_str());
      return 2;
    }
    frames.push_back(v << 10);
  }
  const size_t pool_bytes = absl::GetFlag(FLAGS_pool_mib) << 20;
  if (pool_bytes < 2 * *std::max_element(frames.begin(), frames.end())) {
    std::fprintf(stderr, "--pool_mib must hold at least two of the largest frame\n");
    return 2;
  }
  std::vector<uint8_t> pool(pool_bytes);
  for (size_t i = 0; i < pool.size(); ++i) pool[i] = static_cast<uint8_t>(i * 131 + (i >> 12));
  const size_t total = absl::GetFlag(FLAGS_bytes_mib) << 20;
  const int reps = absl::GetFlag(FLAGS_reps);
  // Reader on CPU 0, writer on CPU 1 (the fresh state needs two CPUs).
  if (std::thread::hardware_concurrency() < 2 || !PinTo(0)) {
    std::fprintf(stderr, "needs two CPUs it may pin threads to\n");
    return 2;
  }
  Writer writer(1);
  const Fn read = __builtin_cpu_supports("avx512f") ? Fn(ReadSumAvx512)
                  : __builtin_cpu_supports("avx2")  ? Fn(ReadSumAvx2)
                                                    : Fn(ReadSum);

  if (absl::GetFlag(FLAGS_payloads)) {
    std::printf(
        "diloco-bench-checksum: GB/s, best of %d; ceiling = read (a vectorised sum over "
        "the same memory, same state); ratio = checksum / read; pool %zu MiB\n",
        reps, pool_bytes >> 20);
    std::printf("%6s %-6s | %7s %7s | %7s %6s %6s\n", "frame", "state", "read", "memcpy", "impl",
                "GB/s", "ratio");
    const char* names[] = {"hot", "fresh", "cold"};
    for (size_t frame : frames)
      for (State st : {State::kHot, State::kFresh, State::kCold}) {
        const double r = Rate(read, st, frame, pool, total, reps, writer);
        const double c = Rate(Copy, st, frame, pool, total, reps, writer);
        for (const auto& impl : diloco::internal::ChecksumImpls()) {
          const double h = Rate(impl.fn, st, frame, pool, total, reps, writer);
          std::printf("%4zuKi %-6s | %7.1f %7.1f | %7s %6.1f %5.0f%%\n", frame >> 10,
                      names[static_cast<int>(st)], r, c, impl.name, h, 100 * h / r);
        }
        std::fflush(stdout);
      }
  }
  if (absl::GetFlag(FLAGS_header_iters) > 0)
    diloco::bench::ReportHeaderChecks(absl::GetFlag(FLAGS_header_reps),
                                      absl::GetFlag(FLAGS_header_iters));
  return 0;
}
