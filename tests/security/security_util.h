// Shared by the security tests: the tiny cluster's plan, a one-shot client that sends a header
// and waits for the reply, and a worker's progress events.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <zmq.hpp>

#include "absl/time/clock.h"
#include "common/plan.h"
#include "schema/curve.h"
#include "schema/transport.h"
#include "tests/integration/cluster.h"
#include "worker/model/gpt/gpt_config.h"

namespace diloco::testing {

inline constexpr char kModel[] = "tiny";
inline constexpr uint32_t kFragments = 4;

// The fingerprints a shard of `shards` serving the tiny model expects.
inline std::pair<uint64_t, uint64_t> TinyFingerprints(uint32_t shards = 1) {
  auto manifest = GptManifest(ParseGptConfig(kModel).value()).value();
  return {Plan::Create(manifest, kFragments, shards).value().fingerprint(), manifest.fingerprint()};
}

inline wire::HeaderFields TinyHeader(wire::MsgType type, uint32_t worker) {
  wire::HeaderFields h;
  h.type = type;
  std::tie(h.plan_fingerprint, h.model_fingerprint) = TinyFingerprints();
  h.worker_id = worker;
  h.generation = 1;
  return h;
}

// Sends `h` on a fresh DEALER (CURVE when `keys` is set) and returns the first parsed reply,
// or nullopt when none arrives within `wait`.
inline std::optional<wire::Message> Ask(const std::string& endpoint, const wire::HeaderFields& h,
                                        const std::string& server_public,
                                        const wire::CurveKeyPair* keys, absl::Duration wait) {
  zmq::context_t ctx(1);
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  if (keys && !wire::MakeCurveClient(s, server_public, keys->public_key, keys->secret_key).ok())
    return std::nullopt;
  s.connect(endpoint);
  if (!wire::Send(s, h, {}, nullptr, false).ok()) return std::nullopt;
  const absl::Time end = absl::Now() + wait;
  while (absl::Now() < end) {
    zmq::pollitem_t item{static_cast<void*>(s), 0, ZMQ_POLLIN, 0};
    zmq::poll(&item, 1, std::chrono::milliseconds(50));
    if (auto frames = wire::TryRecvMultipart(s)) {
      auto m = wire::ParseMessage(std::move(*frames));
      if (m.ok()) return std::move(*m);
    }
  }
  return std::nullopt;
}

// The largest "adoptions" figure in a worker's JSON-lines events (0 before the first).
inline double Adoptions(const std::filesystem::path& jsonl) {
  double best = 0;
  for (const auto& e : ReadEvents(jsonl))
    if (auto it = e.find("adoptions"); it != e.end()) best = std::max(best, it->second);
  return best;
}

inline bool WaitForAdoptions(const std::filesystem::path& jsonl, double n, absl::Duration timeout) {
  const absl::Time end = absl::Now() + timeout;
  while (absl::Now() < end) {
    if (Adoptions(jsonl) >= n) return true;
    absl::SleepFor(absl::Milliseconds(100));
  }
  return false;
}

// The tests' small worker (TinyWorkerArgs) as the only worker of the shard at `endpoint`; it
// stops by itself after 120 s should a test leave it behind.
inline std::vector<std::string> LoneWorkerArgs(const std::string& endpoint, uint32_t id,
                                               const std::filesystem::path& jsonl) {
  std::vector<std::string> argv = TinyWorkerArgs(static_cast<int>(id), {endpoint}, jsonl);
  argv.insert(argv.end(), {"--num_workers=1", "--duration=120s"});
  return argv;
}

}  // namespace diloco::testing
