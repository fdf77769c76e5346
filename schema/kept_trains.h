// Kept trains: the leading chunks of a push train that a lost connection cut, kept under the
// push's identity (worker, generation, fragment) for a bounded time and a bounded total of bytes,
// so that the worker, once reconnected, sends only the chunks the shard lacks instead of the whole
// push again (on a 10 Mbit/s link a cut 16 MB push costs 13 s more). A kept train is only a
// store: the TrainAssembler (schema/train.h) decides which chunk may continue one, and verifies
// every chunk as it verifies any (docs/protocol.md, "Trains").
#pragma once

#include <cstdint>
#include <optional>
#include <vector>
#include <zmq.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/time/time.h"
#include "schema/wire.h"

namespace diloco::wire {

// The chunks of a train received so far, in order.
struct PartialTrain {
  Message first;                       // chunk 0: its header and frame become the joined message's
  std::vector<zmq::message_t> frames;  // chunks 1.. so far
  std::vector<uint64_t> sums;          // the checksum of every chunk so far, chunk 0's first
  absl::Time last;                     // the last chunk arrived (once kept: when it was kept)
  uint32_t chunks() const { return static_cast<uint32_t>(sums.size()); }
  uint64_t bytes() const;
};

// How much of what lost connections cut is kept: each train for `time` at most, all of them
// `bytes` at most together (the oldest dropped first beyond it). 0 bytes keeps nothing.
struct KeepLimits {
  absl::Duration time = absl::ZeroDuration();
  uint64_t bytes = 0;
};

class KeptTrains {
 public:
  // A push is named by its worker, generation and fragment: one push per fragment is in flight
  // at a time, so a newer train of the same three supersedes a kept one.
  struct Id {
    uint32_t worker = 0, fragment = 0;
    uint64_t generation = 0;
    static Id Of(const Header& h) { return {h.worker_id(), h.fragment_id(), h.generation()}; }
    bool operator==(const Id&) const = default;
    template <typename H>
    friend H AbslHashValue(H h, const Id& id) {
      return H::combine(std::move(h), id.worker, id.fragment, id.generation);
    }
  };

  explicit KeptTrains(KeepLimits limits = {}) : limits_(limits) {}

  // Keeps `t`, cut at `now`, in place of any train kept under its id, then drops the oldest kept
  // trains while the total exceeds the byte limit (`t` itself, when it alone exceeds it). Whether
  // `t` is kept.
  bool Put(PartialTrain t, absl::Time now);
  const PartialTrain* Find(const Id& id) const;
  // Hands the train under `id` back (to be continued), or nullopt.
  std::optional<PartialTrain> Take(const Id& id);
  // Forgets the train under `id` (a new send of that fragment's push supersedes it).
  void Erase(const Id& id);
  // Drops the trains kept for longer than the time limit at `now`; returns how many.
  size_t Expire(absl::Time now);
  // What a Welcome to `worker` in `generation` lists: its kept trains, in fragment order.
  std::vector<HeldTrain> Held(uint32_t worker, uint64_t generation) const;

  size_t size() const { return trains_.size(); }
  uint64_t bytes() const { return bytes_; }
  uint64_t kept() const { return kept_; }        // trains ever kept
  uint64_t expired() const { return expired_; }  // dropped by the time limit
  uint64_t evicted() const { return evicted_; }  // dropped by the byte limit
  uint64_t taken() const { return taken_; }      // handed back to be continued

 private:
  void Drop(absl::flat_hash_map<Id, PartialTrain>::iterator it);

  KeepLimits limits_;
  absl::flat_hash_map<Id, PartialTrain> trains_;
  uint64_t bytes_ = 0;
  uint64_t kept_ = 0, expired_ = 0, evicted_ = 0, taken_ = 0;
};

}  // namespace diloco::wire
