// One chaos run: a ChaosCluster trained for a bounded time while faults are injected at seeded
// random, then stopped cleanly and checked against the design's invariants
// (docs/architecture.md, "Invariants"; tests/chaos/invariants.h).
//
// Faults, one target at a time each (at most one shard and two workers down at once):
//   worker_kill      SIGKILL a worker, restart it 1-3 s later (a new generation);
//   worker_freeze    SIGSTOP a worker for 2-6 s, then SIGCONT;
//   shard_kill       SIGKILL a shard and restart it on its store at once;
//   shard_slow_restart  SIGKILL a shard and restart it with --test_read_delay of 4-6 s: its port
//                    bound and unread past the workers' shard timeout, as a large store's
//                    recovery keeps it, so that they reconnect and leave messages queued on
//                    connections they closed;
//   shard_freeze     SIGSTOP a shard for 1-5 s (its workers see it silent and reconnect);
//   shard_restart    SIGTERM a shard (final checkpoint), restart it;
//   kill_unanswered  restart a shard with --test_kill_after_applied=K: it SIGKILLs itself once
//                    K Applied answers are durable and audited but unsent, and is restarted
//                    again, so the workers' resends meet the Duplicate path;
//   link_burst       5% drops, 5% duplicates, 10% delays (reordering), 2% corrupt frames and
//                    3% replays on one shard's proxy for 3-8 s (a low background rate always);
//   disk_full        fill the tmpfs of the shard whose store is on one for 3-6 s.
//
// Checked afterwards:
//   1. during every fault of a worker or shard lasting >= 3 s, every worker untouched by a fault
//      kept stepping, its training thread in steps for >= 0.5 of its own median share of the
//      time (it did not wait on the fleet; its step rate, which follows its share of the CPU,
//      is reported), and every untouched shard closed rounds
//      during every such worker fault; a run in which no such window was checked fails;
//   2, 3, 6. the shards' audit trails and the workers' Applied answers (invariants.h);
//   4. every store passes diloco-ctl show's vetting at the end, and every restart came up: the
//      restarted target (worker_kill, shard_kill, shard_slow_restart, shard_restart,
//      kill_unanswered) was back at work (a worker stepping, a shard closing rounds) within 30 s
//      of the fault's end, unless another fault took the same target out (a kill, freeze,
//      restart or full disk) first;
//   5. no replayed message was answered but with an Error;
//   7. the global model evaluated from the stores (diloco-ctl eval, 32,768 held-out tokens) at
//      the end has closed at least half the gap between theta(0)'s loss and the entropy floor,
//      and is at most kMaxLossRegression (invariants.h) worse than the best of the evaluations
//      taken at 1/3 and 2/3 of the fault period (the same command on the live stores, opened
//      read-only; retried when a store changes under it);
//   8. every push the shards applied (audit trails) and every push a worker sent (sync events)
//      claims at most carry_max x H inner steps (ChaosConfig, the workers' flags);
//   9. nobody is left behind: after the faults end, every worker has a push of every fragment
//      applied (its Applied answers in its sync events) within 30 s.
// A target of a freeze, link burst or full disk not back at work within 30 s of its end (as in
// 4) counts with the process failures (invariant 0): a process that exits by itself or does not
// stop cleanly. And every process stops cleanly at the end (exit status 0).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <map>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "tests/chaos/chaos_cluster.h"
#include "tests/chaos/invariants.h"

namespace diloco::testing {

struct ChaosOptions {
  ChaosConfig cluster;
  absl::Duration duration = absl::Minutes(3);  // of fault injection
  absl::Duration mean_fault_interval = absl::Seconds(3);
  // Evaluations of the global model during the fault period, evenly spaced (invariant 7).
  int midway_evals = 2;
  // Set (from a signal handler) to end the run early: the faults end, the cluster is stopped
  // and its processes reaped, and the report says the invariants were not checked.
  const std::atomic<bool>* interrupted = nullptr;
};

struct FaultWindow {
  std::string kind;
  int target = 0;  // worker or shard index (shard for link_burst and disk_full)
  absl::Time start, end = absl::InfiniteFuture();
  bool survived = false;   // the target was back at work after it
  bool cut_short = false;  // not back before another fault took the same target out
  std::string note;
};

struct ChaosReport {
  std::deque<FaultWindow> faults;  // a deque: the run keeps pointers to open ones
  FaultCounts messages;            // over every proxy
  std::vector<Violation> violations;
  std::map<std::string, std::string> facts;  // figures for the report, e.g. "final_loss"
  double min_step_ratio = 1e9;               // invariant 1's tightest step rate (reported)
  double min_busy_ratio = 1e9;               // invariant 1's tightest margin: time in steps
  std::string Text() const;                  // the table printed at the end
  std::string Json() const;
};

ChaosReport RunChaos(const ChaosOptions& o);

}  // namespace diloco::testing
