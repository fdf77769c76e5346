// Payload trains: a payload of several chunks travels as one ZeroMQ message per chunk, each
// with the whole header (plus num_chunks and chunk_index) and one chunk frame.
//
// Why: libzmq hands a multipart message over only once its last frame is in. By then the first
// frames of a 16 MiB payload have left the receiving core's cache, and verifying their
// checksums reads them back from memory: on 2 cores that kept the push path at ~75% of raw
// ZeroMQ for 16-64 MiB payloads. One message per ~4 MiB chunk is verified right after it
// arrives (benchmarks/transport/RESULTS.md). The receiver joins the chunks back into one
// Message whose payload frames are the chunks' frames, moved, never copied.
//
// ZeroMQ keeps the messages of one connection in order, and senders (wire::Send) send a train
// without interleaving other messages on that connection, so each connection has at most one
// train in progress. A train cut short (a send queue full, a reconnect) is dropped when the
// connection's next train starts, unless the receiver keeps it: a shard keeps a push train whose
// connection was lost (Keep; schema/kept_trains.h), and the push's next send on the worker's new
// connection continues it from the first chunk it lacks. Every chunk of a train declares the
// train's checksum (TrainChecksum of all its chunks' checksums), so chunks that arrive on two
// connections are joined only when they are one payload's: each chunk is verified on its own as
// ever, and the joined train's checksums must hash to what its chunks declared.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "schema/kept_trains.h"
#include "schema/wire.h"

namespace diloco::wire {

// XXH3-64 of the chunks' checksums in order (as little-endian u64s): the train_checksum every
// chunk of a train carries.
uint64_t TrainChecksum(std::span<const uint64_t> chunk_checksums);

class TrainAssembler {
 public:
  // `keep`: what Keep may hold of trains that lost connections cut (default: nothing).
  explicit TrainAssembler(KeepLimits keep = {}) : kept_(keep) {}

  // Adds a validated message received on `connection` at `now`. A message sent whole comes
  // back at once (and ends a partial train there: it was cut short); a chunk is kept until its
  // train is complete, which then comes back as one Message. A chunk that does not continue the
  // connection's train (another payload, a gap, a repeat, a header field that differs) drops the
  // partial train and is refused (Malformed), unless it is the first chunk of a new train (which
  // also forgets a kept train of its push: superseded).
  // A later chunk with no train in progress on its connection resumes the kept train of its push
  // (worker, generation, fragment) when it is the chunk that train lacks next and its header
  // describes the same payload (seq, sizes, codec, versions, tokens, train checksum: every field
  // a chunk of one train shares); one that declares a train checksum and resumes nothing is
  // refused TrainNotHeld (the sender sends the push whole), one without is Malformed. A train
  // whose chunks' checksums do not hash to its declared train checksum is refused BadChecksum.
  absl::StatusOr<std::optional<Message>> Add(const std::string& connection, Message m,
                                             absl::Time now);
  // Forgets a connection's partial train (the connection is gone or was reset).
  void Drop(const std::string& connection);
  // The connection is lost: its partial train is kept (KeptTrains) if it is a push of `worker` in
  // `generation` whose chunks declare a train checksum, else dropped. Whether it was kept.
  bool Keep(const std::string& connection, uint32_t worker, uint64_t generation, absl::Time now);
  // Whether a train is in progress on `connection`.
  bool in_progress(const std::string& connection) const { return partial_.contains(connection); }
  // Drops partial trains that received nothing since `cutoff` (a sender that vanished mid-train);
  // returns how many.
  size_t DropIdleSince(absl::Time cutoff);

  size_t partial_trains() const { return partial_.size(); }
  uint64_t partial_bytes() const;
  uint64_t trains_cut() const { return trains_cut_; }          // dropped incomplete, any reason
  uint64_t trains_resumed() const { return trains_resumed_; }  // kept trains continued
  // The trains lost connections cut: Held (for a Welcome), Expire (from a periodic tick).
  KeptTrains& kept() { return kept_; }
  const KeptTrains& kept() const { return kept_; }

 private:
  // The train ends: `p` joined into one message, unless its chunks are not the payload its
  // train checksum names.
  absl::StatusOr<std::optional<Message>> Join(PartialTrain p);

  absl::flat_hash_map<std::string, PartialTrain> partial_;
  KeptTrains kept_;
  uint64_t trains_cut_ = 0, trains_resumed_ = 0;
};

}  // namespace diloco::wire
