// A synthetic worker for tests and benchmarks at model size: no model math. It connects one
// DEALER to each shard, sets every fragment's theta(0) (a constant), then pushes one encoded
// delta per fragment (the same pseudo-random delta every time) and waits for its answer, as a
// worker streaming its fragments does. It records what every Applied answer carried (the
// published version and a checksum of its values), so a test can compare a recovered shard
// with the last state it published. Every wait is bounded; any answer other than the expected
// one (a refusal, Stale, NoCredit) is returned as an error naming it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/plan.h"
#include "kernels/codec.h"
#include "schema/train.h"
#include "schema/transport.h"

namespace diloco::testing {

class SyntheticPusher {
 public:
  struct Seen {
    uint64_t version = 0;
    uint64_t checksum = 0;  // XXH3-64 of the fp32 values (ValuesChecksum)
  };

  // `endpoints`: one per shard, in shard order; `model`: any --model (common/model_source.h).
  static absl::StatusOr<std::unique_ptr<SyntheticPusher>> Create(std::vector<std::string> endpoints,
                                                                 const std::string& model,
                                                                 uint32_t fragments,
                                                                 kernels::Codec codec,
                                                                 uint32_t worker_id = 1);

  // Hello on every shard (after a shard restarts too: a fresh connection, same generation).
  absl::Status Connect(std::vector<std::string> endpoints);
  // theta(0) of every fragment; waits for each Initialized answer.
  absl::Status InitAll(float value = 0.01f);
  // Pushes fragment f once and waits for its Applied answer.
  absl::Status Push(uint32_t f);
  // One push of every fragment, one at a time.
  absl::Status PushAll();
  // The published version and values of f now, by Pull.
  absl::StatusOr<Seen> Pull(uint32_t f);

  const Plan& plan() const { return *plan_; }
  const std::map<uint32_t, Seen>& last_applied() const { return last_; }
  uint64_t pushes_applied() const { return applied_; }
  uint64_t params() const;
  // Encoded push bytes per parameter.
  double push_bytes_per_param() const;

  static uint64_t ValuesChecksum(const wire::Message& m);

 private:
  SyntheticPusher() = default;
  wire::HeaderFields Header(wire::MsgType t, uint32_t f) const;
  absl::StatusOr<wire::Message> Await(uint32_t shard, const wire::HeaderFields& sent,
                                      absl::Duration timeout);

  std::unique_ptr<Plan> plan_;
  uint64_t model_fingerprint_ = 0;
  kernels::Codec codec_;
  uint32_t worker_id_ = 1;
  zmq::context_t ctx_{1};
  std::vector<std::unique_ptr<zmq::socket_t>> socks_;
  std::vector<wire::TrainAssembler> trains_;
  std::vector<std::shared_ptr<const wire::Bytes>> encoded_;  // per fragment, sent zero-copy
  std::vector<uint64_t> seq_, base_;
  std::map<uint32_t, Seen> last_;
  uint64_t applied_ = 0;
  uint64_t encoded_bytes_ = 0;
};

}  // namespace diloco::testing
