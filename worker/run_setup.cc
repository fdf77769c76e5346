// The parts diloco-worker builds before its run loop (run_setup.h).
#include "worker/run_setup.h"

#include <cmath>
#include <csignal>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/log.h"
#include "common/model_refusal.h"
#include "schema/transport.h"
#include "worker/model/cpu_trainer.h"
#if defined(DILOCO_MODEL_HAVE_CUDA)
#include "worker/model/cuda/cuda_trainer.h"
#endif
#include "worker/model/evaluate.h"
#include "worker/model/synthetic_trainer.h"
#include "worker/run_report.h"

namespace diloco::worker {
namespace {

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

absl::StatusOr<std::unique_ptr<SyncClient>> JoinOrRefuse(const WorkerOptions& w, Trainer& tr,
                                                         std::optional<uint64_t> init_checksum,
                                                         EventLog& log) {
  const uint32_t wid = w.worker_id;
  SyncOptions so = *w.sync;
  so.interrupted = [] { return StopRequested(); };  // SIGINT/SIGTERM end a lockstep wait too
  auto created = SyncClient::Create(so, tr.manifest());
  if (!created.ok()) return created.status();
  std::unique_ptr<SyncClient> sync = *std::move(created);
  const uint64_t initial = ParamsChecksum(tr.params());
  const absl::Time t0 = absl::Now();
  JsonObject setup;  // what the trainer and the sync client hold before any traffic
  setup.Add("event", "setup").Add("worker", uint64_t{wid});
  AddMemory(setup, tr.params().size());
  log.Write(setup);
  const absl::Status st = sync->Join(tr.params(), w.join_timeout);
  // The join pulled every fragment in fp32 at once (4 bytes per parameter of frames, freed but
  // kept mapped by TuneAllocatorForFrames): handed back, as pushes never need that much.
  wire::TrimFrameHeap();
  if (st.ok() && init_checksum && ParamsChecksum(tr.params()) != *init_checksum)
    Logf(LogLevel::kWarning,
         "diloco-worker[%u]: warning: the fleet already had theta(0) and its model "
         "differs from --init_from=%s: training from the fleet's model, not the file",
         wid, w.init_from.c_str());
  if (st.ok() && w.log_sync_events) {
    JsonObject ev;
    ev.Add("event", "joined").Add("worker", uint64_t{wid});
    AddMemory(ev, tr.params().size());
    ev.Add("params_checksum", ParamsChecksum(tr.params()));
    ev.Add("initial_checksum", initial);
    ev.Add("join_ms", absl::ToDoubleMilliseconds(absl::Now() - t0));
    log.Write(ev);
  } else if (absl::IsDeadlineExceeded(st) && w.train_unjoined) {
    Logf(LogLevel::kWarning, "diloco-worker[%u]: %s; training unsynced meanwhile", wid,
         std::string(st.message()).c_str());
    JsonObject ev;
    ev.Add("event", "join_pending").Add("worker", uint64_t{wid});
    ev.Add("joined", uint64_t{sync->stats().joined});
    if (w.log_sync_events) log.Write(ev);
  } else if (!st.ok()) {
    return st;
  }
  return sync;
}

}  // namespace

void CatchStopSignals() {
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
}

bool StopRequested() { return g_stop != 0; }

absl::StatusOr<std::unique_ptr<Trainer>> MakeTrainer(const WorkerOptions& w) {
  const model::TrainerOptions& to = w.trainer;
  if (w.device == Device::kCpu) return model::MakeCpuTrainer(to);
  if (w.device == Device::kSynthetic) {
    model::SyntheticOptions so;
    so.manifest = w.manifest;
    if (w.trains_family_model()) so.vocab = model::Vocab(to);
    so.inner_steps = w.inner_steps;
    so.step_time = w.synthetic_step_time;
    so.seed = to.seed;
    so.lr = to.adamw.lr;
    so.tokens_per_step = static_cast<uint64_t>(to.batch_size) *
                         static_cast<uint64_t>(to.seq_len > 0 ? to.seq_len : model::Context(to));
    return model::MakeSyntheticTrainer(std::move(so));
  }
  if (to.gpus < 1) return absl::InvalidArgumentError("--gpus must be at least 1");
#if defined(DILOCO_MODEL_HAVE_CUDA)
  std::string why;
  const int found = model::CudaDeviceCount(&why);
  if (found < to.gpus)
    return absl::FailedPreconditionError(absl::StrCat(
        "--device=cuda --gpus=", to.gpus, ": ", found, " CUDA GPUs usable on this machine",
        why.empty() ? "" : " (CUDA: ", why, why.empty() ? "" : ")"));
  auto t = model::MakeCudaTrainer(to);
  if (!t.ok()) return t.status();
  Logf(LogLevel::kInfo, "diloco-worker: CUDA trainer on %d GPU(s), %s attention", (*t)->gpus(),
       model::cuda::AttentionName((*t)->attention()));
  return std::unique_ptr<Trainer>(*std::move(t));
#else
  return absl::FailedPreconditionError(
      "--device=cuda: this build has no CUDA backend (configure with nvcc found, "
      "-DDILOCO_CUDA=ON)");
#endif
}

absl::StatusOr<std::unique_ptr<SyncClient>> JoinFleet(const WorkerOptions& w, Trainer& tr,
                                                      std::optional<uint64_t> init_checksum,
                                                      EventLog& log) {
  auto s = JoinOrRefuse(w, tr, init_checksum, log);
  if (s.ok()) return s;
  const std::string why = ExplainModelRefusal(s.status().message(), tr.manifest(), w.model_spec);
  return why.empty()
             ? s.status()
             : absl::Status(s.status().code(), absl::StrCat(s.status().message(), "; ", why));
}

Baseline EvaluateBaseline(const WorkerOptions& w, const island::IslandSpec& spec, Trainer& tr) {
  const model::TrainerOptions& to = w.trainer;
  Baseline b;
  b.evaluates = w.evaluates() && spec.rank == 0;
  const bool evaluates = b.evaluates;
  b.eval0 = evaluates ? tr.EvalLoss() : std::nanf("");
  // Synthetic data: the loss of the ideal model on the same held-out tokens, the floor.
  const auto oracle = evaluates ? model::HeldoutOracle(to) : absl::StatusOr<double>(-1.0);
  if (oracle.ok()) b.oracle = *oracle;
  b.floor_str =
      oracle.ok() && *oracle >= 0 ? absl::StrFormat(" (entropy floor %.4f)", *oracle) : "";
  // Every figure is on these targets.
  b.heldout_tokens = evaluates ? model::HeldoutTokens(to) : 0;
  b.eval_str =
      evaluates ? absl::StrFormat("held-out loss %.4f on %lld tokens%s", b.eval0,
                                  static_cast<long long>(b.heldout_tokens), b.floor_str)
      : spec.rank != 0
          ? absl::StrCat("island rank ", spec.rank, " of ", spec.size, ": rank 0 evaluates")
          : absl::StrCat("synthetic learner, ", absl::FormatDuration(w.synthetic_step_time),
                         " per step, no held-out evaluation");
  return b;
}

}  // namespace diloco::worker
