// Payload trains: a payload of several chunks travels as one ZeroMQ message per chunk, each
// with the whole header (plus num_chunks and chunk_index) and one chunk frame.
//
// Why: libzmq hands a multipart message over only once its last frame is in. By then the first
// frames of a 16 MiB payload have left the receiving core's cache, and verifying their
// checksums reads them back from memory: on 2 cores that kept the push path at ~75% of raw
// ZeroMQ for 16-64 MiB payloads. One message per ~4 MiB chunk is verified right after it
// arrives (benchmarks/RESULTS.md, Transport). The receiver joins the chunks back into one
// Message whose payload frames are the chunks' frames, moved, never copied.
//
// ZeroMQ keeps the messages of one connection in order, and senders (wire::Send) send a train
// without interleaving other messages on that connection, so each connection has at most one
// train in progress. A train cut short (a send queue full, a reconnect) is dropped when the
// connection's next train starts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "schema/wire.h"

namespace diloco::wire {

class TrainAssembler {
 public:
  // Adds a validated message received on `connection` at `now`. A message sent whole comes
  // back at once (and ends a partial train there: it was cut short); a chunk is kept until its
  // train is complete, which then comes back as one Message. A chunk that does not continue the
  // connection's train (another payload, a gap, a repeat, a header field that differs) drops the
  // partial train and is refused (Malformed), unless it is the first chunk of a new train.
  absl::StatusOr<std::optional<Message>> Add(const std::string& connection, Message m,
                                             absl::Time now);
  // Forgets a connection's partial train (the connection is gone or was reset).
  void Drop(const std::string& connection);
  // Drops partial trains that received nothing since `cutoff` (a sender that vanished mid-train);
  // returns how many.
  size_t DropIdleSince(absl::Time cutoff);

  size_t partial_trains() const { return partial_.size(); }
  uint64_t partial_bytes() const;
  uint64_t trains_cut() const { return trains_cut_; }  // dropped incomplete, any reason

 private:
  struct Partial {
    Message first;  // chunk 0: its header and frame become the joined message's
    std::vector<zmq::message_t> frames;  // chunks 1.. so far
    absl::Time last;
  };
  absl::flat_hash_map<std::string, Partial> partial_;
  uint64_t trains_cut_ = 0;
};

}  // namespace diloco::wire
