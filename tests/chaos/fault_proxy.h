// FaultProxy: a ZeroMQ message proxy between workers and one shard that drops, duplicates,
// delays (and so reorders), corrupts and replays whole messages at seeded random, for the chaos
// suite (tests/chaos/chaos_main.cc).
//
// Workers connect their DEALERs to endpoint(); the proxy's ROUTER gives each connection a
// routing id, and for each it opens a DEALER of its own to the shard, so the shard sees one
// connection per worker connection, as without the proxy. A shard restart is seen by the proxy's
// DEALERs reconnecting (ZeroMQ does that by itself), a worker reconnect by a new routing id. Each
// message is forwarded whole (every frame), so the faults are those of a network that loses,
// repeats and reorders messages; a byte-level cut is what killing a process does.
//
// Corruption flips one bit of a payload frame (the frame checksum must catch it) or cuts the
// header frame in half (FlatBuffers verification must catch it). A header flip, a fault kind of
// its own, flips one bit at a random byte of the header frame, so any field (seq, fragment,
// weight, versions) or the trailer can be hit: the header checksum must catch it (protocol
// version 3, schema/wire.h), and the worker's lost-push resend or pull must recover.
//
// A replay sends a copy of an earlier worker message on a connection of its own that never said
// Hello; the shard must refuse it. Answers on that connection are counted by kind
// (replay_refused / replay_answered), so "a replayed message changes no state" can be checked.
//
// One thread owns every socket. Rates may be changed from any thread while it runs.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace diloco::testing {

// Per-message probabilities, each direction alike; at most one fault per message.
struct FaultRates {
  double drop = 0;
  double duplicate = 0;
  double delay = 0;  // held for a uniform time in (0, max_delay]
  double corrupt = 0;
  double replay = 0;       // worker -> shard only: also replayed on a connection without Hello
  double header_flip = 0;  // one bit of the header frame flipped, at a random byte
  absl::Duration max_delay = absl::Milliseconds(300);
};

struct FaultCounts {
  uint64_t forwarded = 0;  // messages passed on (a duplicate counts twice)
  uint64_t dropped = 0, duplicated = 0, delayed = 0, corrupted = 0, replayed = 0;
  uint64_t header_flipped = 0;
  uint64_t replay_refused = 0;   // Error answers to replays
  uint64_t replay_answered = 0;  // any other answer to a replay: a replay was accepted
  uint64_t connections = 0;      // worker connections seen
  uint64_t faults() const {
    return dropped + duplicated + delayed + corrupted + replayed + header_flipped;
  }
  FaultCounts& operator+=(const FaultCounts& o) {
    forwarded += o.forwarded;
    dropped += o.dropped;
    duplicated += o.duplicated;
    delayed += o.delayed;
    corrupted += o.corrupted;
    replayed += o.replayed;
    header_flipped += o.header_flipped;
    replay_refused += o.replay_refused;
    replay_answered += o.replay_answered;
    connections += o.connections;
    return *this;
  }
};

class FaultProxy {
 public:
  // Binds 127.0.0.1 at a free port and forwards to `upstream` (a tcp:// endpoint).
  static absl::StatusOr<std::unique_ptr<FaultProxy>> Start(const std::string& upstream,
                                                           uint64_t seed);
  ~FaultProxy();  // stops the thread and closes every socket
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  const std::string& endpoint() const { return endpoint_; }
  void set_rates(const FaultRates& r);
  FaultCounts counts() const;

 private:
  struct Loop;
  FaultProxy() = default;

  std::string endpoint_;
  mutable Mutex mu_;
  FaultRates rates_ ABSL_GUARDED_BY(mu_);
  FaultCounts counts_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stop_{false};
  std::unique_ptr<Loop> loop_;
  std::thread thread_;
};

}  // namespace diloco::testing
