// --audit_jsonl: what a shard promised, one JSON line per promise, written before the promise
// reaches anyone (flushed per line, so it survives a SIGKILL that follows):
//   {"event":"recovered","incarnation":"I","fragment":F,"version":V,"digest":D}  per owned
//       fragment at each start (version 0: no theta(0) yet);
//   {"event":"initialized","incarnation":"I","fragment":F,"worker":W}  theta(0) accepted;
//   {"event":"applied","incarnation":"I","fragment":F,"version":V,"digest":D,"worker":W,
//    "generation":G,"seq":S,"steps":N,"tokens":T}  one per Applied answer, before it is sent:
//       in per-round mode after its version is durable. N and T are the local steps and tokens
//       the push claimed (as sent, before the shard's push guard capped its weight), so a push
//       carrying far more steps than the fleet's cadence can be traced to its worker.
// I is the incarnation as a decimal string (64 random bits do not survive a JSON number); D is
// 48 bits of a checksum over the fragment's published values (exact as a JSON number),
// the same at publication and at recovery. The chaos suite (tests/chaos/) checks the design's
// invariants against these lines: no push applied twice across restarts, a restart recovers
// the last published version (per-round) or a checkpoint (periodic), theta(0) accepted once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/event_log.h"
#include "server/shard.h"

namespace diloco::server {

class AuditLog {
 public:
  // An empty path gives a log that writes nothing (Answers still counts).
  static absl::StatusOr<AuditLog> Open(const std::string& path);

  void Started(const Shard& shard);
  // Writes the promises among the answers `shard` is about to send; returns how many of them
  // are Applied answers.
  size_t Answers(const Shard& shard, const std::vector<Outgoing>& out);

  // 48 bits of a checksum over a fragment's per-chunk checksums.
  static uint64_t Digest(const std::vector<uint64_t>& chunk_checksums);

 private:
  EventLog log_;
  bool on_ = false;
};

}  // namespace diloco::server
