// diloco-wan-delay: a user-space netem for kernels without one. It reads every IP packet routed
// into a TUN device, holds it for the one-way delay (plus jitter), drops it with the loss
// probability, and writes it back into the same device, from where the kernel routes it on to
// its destination (benchmarks/wan/wan_net.sh sets up the policy routing that sends forwarded
// packets into the TUN device once, and packets coming out of it onwards).
//
// Packets, not byte streams: the endpoints' TCP sees the emulated round-trip time itself, so its
// slow start, its window limit (a connection carries at most its window per RTT) and its loss
// recovery (SACK, fast retransmit, RTO) are the kernel's own, as on a real WAN. A TCP-level
// forwarder would end each connection at the proxy and hide all three.
//
// Jitter never reorders a flow: a packet's release time is now + delay + U(0, jitter), but no
// earlier than the release of the flow's (source, destination) previous packet, as in a real
// path's queues. Every packet is held at least --delay (and at most 200 us more, so that
// releases are batched). One thread; the packets in flight are
// bounded by the links' rate x delay (the tbf qdiscs in front of the device).
//
// Usage: diloco-wan-delay --tun=NAME --delay=25ms [--jitter=1ms] [--loss=0.0001] [--seed=N]
//        [--stats=FILE]   (FILE gets one JSON line of counts on SIGTERM/SIGINT)
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <queue>
#include <random>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/time/time.h"

ABSL_FLAG(std::string, tun, "", "TUN device to attach to (created by wan_net.sh, persistent)");
ABSL_FLAG(absl::Duration, delay, absl::Milliseconds(25), "one-way delay added to every packet");
ABSL_FLAG(absl::Duration, jitter, absl::ZeroDuration(),
          "extra delay, uniform in [0, jitter] per packet (never reordering a flow)");
ABSL_FLAG(double, loss, 0.0, "probability that a packet is dropped");
ABSL_FLAG(uint64_t, seed, 1, "seed of the jitter and loss draws");
ABSL_FLAG(std::string, stats, "", "on exit, write one JSON line of counts to this file");

namespace {

using Clock = std::chrono::steady_clock;
volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

struct Held {
  Clock::time_point release;
  uint64_t order;  // arrival order: equal release times leave first-in first-out
  std::vector<uint8_t> bytes;
  bool operator>(const Held& o) const {
    return release != o.release ? release > o.release : order > o.order;
  }
};

// The (source, destination) of an IPv4 or IPv6 packet as one key; 0 when unparseable.
uint64_t FlowKey(const uint8_t* p, size_t n) {
  uint64_t k = 0;
  if (n >= 20 && (p[0] >> 4) == 4) {
    std::memcpy(&k, p + 12, 8);  // source and destination address, adjacent
  } else if (n >= 40 && (p[0] >> 4) == 6) {
    uint64_t s = 0, d = 0;
    std::memcpy(&s, p + 16, 8);
    std::memcpy(&d, p + 32, 8);
    k = s * 0x9e3779b97f4a7c15ull ^ d;
  }
  return k;
}

// How late a packet may leave past its release time, so that releases are batched.
constexpr auto kReleaseSlack = std::chrono::microseconds(200);

int OpenTun(const std::string& name) {
  const int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return -1;
  ifreq ifr{};
  ifr.ifr_flags = IFF_TUN | IFF_NO_PI;
  std::snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name.c_str());
  if (ioctl(fd, TUNSETIFF, &ifr) < 0) {
    close(fd);
    return -1;
  }
  return fd;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("diloco-wan-delay --tun=NAME --delay=25ms [--jitter] [--loss]");
  absl::ParseCommandLine(argc, argv);
  const std::string tun = absl::GetFlag(FLAGS_tun);
  const auto delay = absl::ToChronoNanoseconds(absl::GetFlag(FLAGS_delay));
  const double jitter_ns = absl::ToDoubleNanoseconds(absl::GetFlag(FLAGS_jitter));
  const double loss = absl::GetFlag(FLAGS_loss);
  if (tun.empty() || delay.count() < 0 || jitter_ns < 0 || !(loss >= 0 && loss < 1)) {
    std::fprintf(stderr,
                 "diloco-wan-delay: need --tun, --delay >= 0, --jitter >= 0, "
                 "0 <= --loss < 1\n");
    return 2;
  }
  const int fd = OpenTun(tun);
  if (fd < 0) {
    std::fprintf(stderr, "diloco-wan-delay: attach to %s: %s\n", tun.c_str(), strerror(errno));
    return 1;
  }
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed));
  std::uniform_real_distribution<double> unit(0, 1);

  std::priority_queue<Held, std::vector<Held>, std::greater<>> held;
  absl::flat_hash_map<uint64_t, Clock::time_point> last_release;  // per flow
  std::vector<uint8_t> buf(65536);                                // the largest IP packet
  uint64_t order = 0, packets = 0, bytes = 0, dropped = 0, write_errors = 0;
  size_t held_bytes = 0, max_held_bytes = 0;

  while (!g_stop) {
    // Wait for a packet or the next release, whichever is first, plus kReleaseSlack: the packets
    // due by then leave in one batch (one wake-up per packet would cap the rate far lower).
    timespec ts{1, 0};
    if (!held.empty()) {
      const auto wait = std::max(held.top().release - Clock::now(), Clock::duration::zero());
      const auto ns =
          std::chrono::duration_cast<std::chrono::nanoseconds>(wait + kReleaseSlack).count();
      ts = {static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
    }
    pollfd pfd{fd, POLLIN, 0};
    if (ppoll(&pfd, 1, &ts, nullptr) < 0 && errno != EINTR) break;
    for (int budget = 0; budget < 1024; ++budget) {  // drain what arrived, bounded per pass
      const ssize_t n = read(fd, buf.data(), buf.size());
      if (n <= 0) break;
      ++packets;
      bytes += static_cast<uint64_t>(n);
      if (loss > 0 && unit(rng) < loss) {
        ++dropped;
        continue;
      }
      const auto now = Clock::now();
      auto release = now + delay;
      if (jitter_ns > 0)
        release += std::chrono::nanoseconds(static_cast<int64_t>(unit(rng) * jitter_ns));
      auto& last = last_release[FlowKey(buf.data(), static_cast<size_t>(n))];
      release = std::max(release, last);
      last = release;
      held_bytes += static_cast<size_t>(n);
      max_held_bytes = std::max(max_held_bytes, held_bytes);
      held.push(Held{release, order++, std::vector<uint8_t>(buf.begin(), buf.begin() + n)});
    }
    const auto now = Clock::now();
    while (!held.empty() && held.top().release <= now) {
      const Held& h = held.top();
      if (write(fd, h.bytes.data(), h.bytes.size()) < 0) ++write_errors;
      held_bytes -= h.bytes.size();
      held.pop();
    }
  }
  if (const std::string path = absl::GetFlag(FLAGS_stats); !path.empty()) {
    if (FILE* f = std::fopen(path.c_str(), "w")) {
      const nlohmann::ordered_json counts = {{"packets", packets},
                                             {"bytes", bytes},
                                             {"dropped", dropped},
                                             {"write_errors", write_errors},
                                             {"max_held_bytes", max_held_bytes}};
      std::fprintf(f, "%s\n", counts.dump().c_str());
      std::fclose(f);
    }
  }
  close(fd);
  return 0;
}
