// Test-only fault injection, behind one interface. A process's faults live in one TestFaults
// that production code reaches only through a pointer, null unless a test asked for a fault:
// a flag of the binary's test-only group (server/flags/test_only.cc) or a test's own options
// (SyncOptions::test_*, worker/shard_session.h). With the pointer null a run takes no fault
// branch, and the hooks are found in one place rather than beside the production options.
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
  // A worker's shard session (SyncOptions::test_lose_push_sends, test_corrupt_push_sends): the
  // first sends of fragment 0's first push are lost on the way, or carry one flipped payload
  // byte under the true checksums.
  FaultCount lose_push_sends;
  FaultCount corrupt_push_sends;
};

}  // namespace diloco
