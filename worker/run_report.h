// What diloco-worker reports about a run: the JSON-lines events' figures (memory, sync traffic,
// utilization, checksums), the sync client's events, the banner's codec and H, and the
// held-out evaluation on the trainer. Kept apart from the run loop (run_loop.h) so that the
// loop reads as the order of a step and the report's fields live in one place.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/event_log.h"
#include "worker/sync_client.h"
#include "worker/trainer.h"
#include "worker/worker_flags.h"

namespace diloco::worker {

// Prints "diloco-worker: <message>" on stderr; returns the exit code of a failed run (2).
int Fail(const absl::Status& s);

// 48 bits of the parameters' checksum: exact as a JSON number (a double).
uint64_t ParamsChecksum(std::span<const float> p);

// Takes the sync client's events; writes them to `log` when `write` (--log_sync_events). A
// change of --codec=auto / --inner_steps=auto's choice is also said on stderr.
void WriteSyncEvents(SyncClient& sync, uint32_t wid, bool write, EventLog& log);

// Held-out loss of `values` on the trainer's own device (a GPU worker's model is far too slow to
// evaluate on the CPU). With `restore` the trainer's parameters are put back afterwards, from a
// copy (4 bytes per parameter while it lasts); without, they are left as `values` (the end of a
// run, when nothing reads them again).
float EvalOnTrainer(Trainer& tr, std::span<const float> values, bool restore = true);

// This process's resident memory now and at its peak, per parameter, into `ev`.
void AddMemory(JsonObject& ev, uint64_t params);

// The sync client's traffic, downloads (whole or rebuilt from quantized updates) and the time
// from a push to the adoption of its answer, into `ev`; p50 and p99 are over the latest
// latencies and absent before the first.
void AddSyncFigures(JsonObject& ev, const SyncStats& st);

// The banner's codec and H: fixed, or what --codec=auto / --inner_steps=auto choose from.
std::string CodecText(const WorkerOptions& w);
std::string HText(const WorkerOptions& w);

// Time inside Trainer::Step (busy) over the training loop's wall time so far: the share of its
// time the learner computed rather than synced, logged or waited.
double Utilization(absl::Duration busy, absl::Duration wall);
void AddUtilization(JsonObject& ev, absl::Duration busy, absl::Duration wall);

}  // namespace diloco::worker
