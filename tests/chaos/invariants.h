// The design's invariants, checked after a chaos run against what the processes recorded:
// each shard's audit trail (--audit_jsonl, server/audit_log.h) and each worker's sync events
// (--log_sync_events). Pure functions over parsed lines, so each check is tested on its own
// with a violation planted (tests/chaos/invariants_test.cc).
//
// Numbering follows docs/architecture.md, "Invariants":
//   2. no push is applied twice: across every incarnation of a shard, a push (worker,
//      generation, fragment, seq) is part of at most one version that was not rolled back;
//   3. per-round durability: a restart recovers at least the last version the shard published,
//      and at that version the very values it published; periodic: a version it published (a
//      checkpoint), with the values it published at that version, never beyond what it
//      published;
//   6. per-round: the versions a worker is answered with only grow; theta(0) of a fragment is
//      accepted once in a store's life.
// (1, 4, 5 and 7 are checked by the driver itself: step rates during faults, store vetting,
// replays refused, the final held-out loss.)
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace diloco::testing {

struct AuditLine {
  enum Kind { kRecovered, kInitialized, kApplied } kind = kApplied;
  uint64_t incarnation = 0, fragment = 0, version = 0, digest = 0;
  uint64_t worker = 0, generation = 0, seq = 0;
};

// The audit lines of a file, in order; lines that do not parse (a line cut by SIGKILL) skipped.
std::vector<AuditLine> ReadAudit(const std::filesystem::path& jsonl);

struct Violation {
  int invariant = 0;
  std::string what;
};

struct AuditSummary {
  uint64_t incarnations = 0;  // starts seen
  uint64_t applied = 0;       // Applied answers audited
  uint64_t rolled_back = 0;   // applied pushes undone by a periodic shard's restart
  uint64_t max_version = 0;   // newest version published, over all fragments
};

// Invariants 2, 3 and theta(0)-once over one shard's audit trail.
std::vector<Violation> CheckShardAudit(const std::vector<AuditLine>& lines, bool per_round,
                                       AuditSummary* summary = nullptr);

// One Applied answer a worker received: {"event":"applied","shard","fragment","version"} of
// its sync events, in the order it received them.
struct WorkerApplied {
  uint64_t shard = 0, fragment = 0, version = 0;
};

// Invariant 6 for one run of one worker: per (shard, fragment) of the shards in `per_round`,
// versions never go down.
std::vector<Violation> CheckWorkerVersions(const std::string& worker,
                                           const std::vector<WorkerApplied>& applied,
                                           const std::vector<bool>& per_round);

}  // namespace diloco::testing
