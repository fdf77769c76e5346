// Test-only fault injection, behind one interface. A process's faults live in one TestFaults
// that production code reaches only through a pointer, null unless a test asked for a fault:
// a flag of the binary's test-only group (server/flags/test_only.cc, whose TestFaults reach the
// serve loop as ServerOptions::faults and the shard as ShardOptions::faults) or a test's own
// SyncOptions::faults (worker/sync_options.h; each shard session and link spends its own copy).
// With the pointer null a run takes no fault branch, and the hooks are found in one place
// rather than beside the production options.
#pragma once

#include <cstdint>

#include "absl/time/time.h"

namespace diloco {

// A number of faults still to inject, spent one at a time.
class FaultCount {
 public:
  explicit FaultCount(uint64_t n = 0) : left_(n) {}
  // True, and one fewer left, while any is left.
  bool Take() {
    if (left_ == 0) return false;
    --left_;
    return true;
  }
  uint64_t left() const { return left_; }

 private:
  uint64_t left_;
};

struct TestFaults {
  // diloco-server (--test_kill_after_applied): SIGKILL itself once this many Applied answers
  // are ready, durable and audited but none sent; 0: never.
  uint64_t kill_after_applied = 0;
  // diloco-server (--test_read_delay): after the store is recovered, wait this long before
  // reading the socket, which is bound all the while (a slow recovery).
  absl::Duration read_delay;
  // A shard (--test_drop_pushes, --test_drop_seed; the convergence study): this fraction of
  // pushes, in [0, 1), is acked Applied but never merged, as if lost on the way: its round is
  // the mean of the others (a round of dropped pushes only leaves theta as it was). Which
  // pushes is a hash of drop_seed, the shard index, the worker's id, the fragment and the push's
  // sequence number, not of arrival order or of the worker's generation (a start time), so a
  // lockstep fleet drops the same pushes in every run, and another seed draws other pushes.
  double drop_pushes = 0;
  uint64_t drop_seed = 0;
  // A worker's shard session: the first sends of fragment 0's first push (seq 1) are lost on
  // the way (no answer comes; the resend timer must notice), or carry one flipped payload byte
  // under the true checksums (the shard answers BadChecksum).
  FaultCount lose_push_sends;
  FaultCount corrupt_push_sends;
  // A worker's shard link: the first sends of fragment 0's first push (seq 1) go whole with one
  // bit of the header's seq field flipped under its sealed checksum (the shard answers
  // BadChecksum naming no message; the lost-push resend recovers it).
  FaultCount corrupt_push_header_sends;
};

}  // namespace diloco
