// diloco-worker: one learner. Trains the GPT locally (AdamW, H inner steps), and through the
// SyncClient pushes quantised deltas to the shards and adopts the fragments they send back,
// without the training loop ever waiting on the network. --device=synthetic swaps the GPT for a
// learner that only waits and perturbs its parameters (worker/model/synthetic_trainer.h), to
// drive the sync path at fleet scale (benchmarks/fleet/diloco-bench), for any model's tensors
// (--model=hf:DIR, manifest:PATH, ...); the GPT trainers take the GPT presets and specs only.
#include <csignal>
#include <cstdio>
#include <memory>
#include <optional>
#include <span>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/event_log.h"
#include "common/log.h"
#include "common/version.h"
#include "schema/transport.h"
#include "schema/wire.h"
#include "worker/island_run.h"
#include "worker/model/lr_schedule.h"
#include "worker/model/safetensors.h"
#include "worker/run_loop.h"
#include "worker/run_report.h"
#include "worker/run_setup.h"
#include "worker/state_keeper.h"
#include "worker/sync_client.h"
#include "worker/worker_flags.h"

int main(int argc, char** argv) {
  using namespace diloco;
  using worker::Fail;
  SetVersionFlag("diloco-worker", wire::kProtocolVersion);
  worker::ParseWorkerFlags(argc, argv);
  // A write to a peer that died must fail, not kill: gloo's TCP pairs (islands) send without
  // MSG_NOSIGNAL, and a SIGPIPE there ended a rank whose peer was killed with status 141
  // instead of the error that names the lost rank (IslandProcessTest, about 1 run in 8).
  std::signal(SIGPIPE, SIG_IGN);
  auto options = worker::WorkerOptionsFromFlags();
  if (!options.ok()) return Fail(options.status());
  // One rank of an island (worker/island_run.h): its slice of the batch; rank 0 speaks for it.
  const auto spec = worker::PrepareIsland(*options);
  if (!spec.ok()) return Fail(spec.status());
  const worker::WorkerOptions& w = *options;
  const uint32_t wid = w.worker_id;
  wire::TuneAllocatorForFrames();

  auto trainer = worker::MakeTrainer(w);
  if (!trainer.ok()) return Fail(trainer.status());
  Trainer& tr = **trainer;
  auto log = EventLog::Open(w.metrics_jsonl);
  if (!log.ok()) return Fail(log.status());
  auto island_run = worker::JoinIsland(*spec, w, tr);
  if (!island_run.ok()) return Fail(island_run.status());
  island::IslandSteps* const island = island_run->steps.get();
  std::optional<uint64_t> init_checksum;  // of --init_from's parameters
  if (!w.init_from.empty()) {
    // Any --model's file or Hugging Face folder, any float dtype, checked tensor by tensor
    // before the join (a refused file uploads nothing), read straight into the parameters.
    const std::span<float> p = tr.params();  // once: a GPU trainer's host mirror
    if (auto st = model::ReadModelForInitInto(w.init_from, tr.manifest(), p); !st.ok())
      return Fail(st);
    init_checksum = worker::ParamsChecksum(p);
  }

  std::unique_ptr<worker::SyncClient> sync;
  if (w.sync) {
    auto s = worker::JoinFleet(w, tr, init_checksum, *log);
    if (!s.ok()) return Fail(s.status());
    sync = *std::move(s);
  }
  // Every rank starts from rank 0's model, joined (or still joining) to the fleet's.
  if (island)
    if (auto st = island->BroadcastAll(w.join_timeout + spec->timeout); !st.ok()) return Fail(st);
  const bool joined_logged = !w.log_sync_events || (sync && sync->joined());
  worker::CatchStopSignals();
  const worker::Baseline before = worker::EvaluateBaseline(w, *spec, tr);
  Logf(LogLevel::kInfo, "diloco-worker[%u]: model %s (%lu params), %s, codec %s, H=%s, %s; %s", wid,
       w.model_name().c_str(), static_cast<unsigned long>(tr.manifest().total_elements()),
       model::Describe(w.lr_schedule).c_str(), worker::CodecText(w).c_str(),
       worker::HText(w).c_str(),
       sync ? absl::StrCat("plan ", absl::Hex(sync->plan_fingerprint())).c_str() : "no sync",
       before.eval_str.c_str());

  worker::StateKeeper keeper(w, spec->rank);
  const auto resumed = keeper.Restore(tr);
  if (!resumed.ok()) return Fail(resumed.status());
  if (w.start_step > 0 || !resumed->empty())
    Logf(LogLevel::kInfo, "diloco-worker[%u]: resumes its schedule at step %ld of %ld%s%s", wid,
         static_cast<long>(w.start_step), static_cast<long>(w.steps),
         w.resumed_elapsed > absl::ZeroDuration()
             ? absl::StrCat(" after ", absl::FormatDuration(w.resumed_elapsed)).c_str()
             : "",
         resumed->empty() ? "" : absl::StrCat(", with ", *resumed).c_str());
  return worker::RunTraining({.options = w,
                              .spec = *spec,
                              .trainer = tr,
                              .log = *log,
                              .sync = sync.get(),
                              .island_run = *island_run,
                              .keeper = keeper,
                              .before = before,
                              .joined_logged = joined_logged});
}
