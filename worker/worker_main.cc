// diloco-worker: one learner. Trains the GPT locally (AdamW, H inner steps), and through the
// SyncClient pushes quantised deltas to the shards and adopts the fragments they send back,
// without the training loop ever waiting on the network. --device=synthetic swaps the GPT for a
// learner that only waits and perturbs its parameters (worker/model/synthetic_trainer.h), to
// drive the sync path at fleet scale (benchmarks/fleet/diloco-bench), for any model's tensors
// (--model=hf:DIR, manifest:PATH, ...); the GPT trainers take the GPT presets and specs only.
#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/checksum.h"
#include "common/ema.h"
#include "common/event_log.h"
#include "common/model_refusal.h"
#include "common/model_spec.h"
#include "common/process_memory.h"
#include "common/version.h"
#include "schema/curve.h"
#include "schema/transport.h"
#include "worker/model/cpu_trainer.h"
#if defined(DILOCO_MODEL_HAVE_CUDA)
#include "worker/model/cuda/cuda_trainer.h"
#endif
#include "worker/island_run.h"
#include "worker/model/evaluate.h"
#include "worker/model/lr_schedule.h"
#include "worker/model/safetensors.h"
#include "worker/model/synthetic_trainer.h"
#include "worker/state_keeper.h"
#include "worker/sync_client.h"
#include "worker/worker_flags.h"

namespace {

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "diloco-worker: %s\n", std::string(s.message()).c_str());
  return 2;
}

// 48 bits of the parameters' checksum: exact as a JSON number (a double).
uint64_t ParamsChecksum(std::span<const float> p) {
  return diloco::Checksum64(p.data(), p.size_bytes()) & ((uint64_t{1} << 48) - 1);
}

// Takes the sync client's events; writes them to `log` when `write` (--log_sync_events). A
// change of --codec=auto / --inner_steps=auto's choice is also said on stderr.
void WriteSyncEvents(diloco::worker::SyncClient& sync, uint32_t wid, bool write,
                     diloco::EventLog& log) {
  const auto events = sync.TakeEvents();
  for (const auto& e : events)
    if (e.kind == diloco::worker::SyncEvent::kLinkChoice)
      std::fprintf(stderr, "worker %u link choice: %s\n", wid, e.detail.c_str());
  if (!write) return;
  for (const auto& e : events) {
    diloco::JsonObject ev;
    ev.Add("event", diloco::worker::SyncEventName(e.kind)).Add("worker", uint64_t{wid});
    ev.Add("shard", uint64_t{e.shard});
    if (e.kind != diloco::worker::SyncEvent::kShardRestart &&
        e.kind != diloco::worker::SyncEvent::kLinkChoice) {
      ev.Add("fragment", uint64_t{e.fragment}).Add("seq", e.seq);
      ev.Add("base_version", e.base_version).Add("version", e.version);
    }
    if (e.kind == diloco::worker::SyncEvent::kPush ||
        e.kind == diloco::worker::SyncEvent::kReanchor)
      ev.Add("steps", e.steps).Add("tokens", e.tokens);
    if (e.kind == diloco::worker::SyncEvent::kPush)
      ev.Add("codec", diloco::kernels::CodecName(e.codec));
    if (e.kind == diloco::worker::SyncEvent::kLinkChoice)
      ev.Add("inner_steps", e.steps).Add("codec", diloco::kernels::CodecName(e.codec));
    if (!e.detail.empty()) ev.Add("detail", e.detail);
    log.Write(ev);
  }
}

// Held-out loss of `values` on the trainer's own device (a GPU worker's model is far too slow to
// evaluate on the CPU). With `restore` the trainer's parameters are put back afterwards, from a
// copy (4 bytes per parameter while it lasts); without, they are left as `values` (the end of a
// run, when nothing reads them again).
float EvalOnTrainer(diloco::Trainer& tr, std::span<const float> values, bool restore = true) {
  std::span<float> p = tr.params();
  std::vector<float> saved;
  if (restore) saved.assign(p.begin(), p.end());
  std::copy(values.begin(), values.end(), p.begin());
  const float loss = tr.EvalLoss();
  if (!restore) return loss;
  p = tr.params();  // fetched again: a GPU trainer's host mirror is refreshed by params()
  std::copy(saved.begin(), saved.end(), p.begin());
  return loss;
}

// This process's resident memory now and at its peak, per parameter, into `ev`.
void AddMemory(diloco::JsonObject& ev, uint64_t params) {
  const auto m = diloco::ReadProcessMemory();
  if (!m.ok() || params == 0) return;
  ev.Add("resident_bytes_per_param", static_cast<double>(m->resident_bytes) / params);
  ev.Add("peak_bytes_per_param", static_cast<double>(m->peak_resident_bytes) / params);
}

// The q-quantile (nearest rank) of a non-empty `v`.
double Quantile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
  return v[std::clamp<size_t>(rank, 1, v.size()) - 1];
}

// The sync client's traffic, downloads (whole or rebuilt from quantized updates) and the time
// from a push to the adoption of its answer, into `ev`; p50 and p99 are over the latest
// latencies and absent before the first.
void AddSyncFigures(diloco::JsonObject& ev, const diloco::worker::SyncStats& st) {
  ev.Add("bytes_sent", st.bytes_sent).Add("bytes_received", st.bytes_received);
  ev.Add("codec", diloco::kernels::CodecName(st.codec_now));
  ev.Add("link_choices", st.link_choices);
  ev.Add("up_bytes_per_s", st.up_bytes_per_s).Add("down_bytes_per_s", st.down_bytes_per_s);
  ev.Add("down_bytes_per_param", st.down_bytes_per_param);
  ev.Add("round_need_s", st.round_need_s).Add("round_budget_s", st.round_budget_s);
  ev.Add("updates_full", st.updates_full).Add("updates_delta", st.updates_delta);
  ev.Add("download_mismatches", st.download_mismatches);
  ev.Add("push_to_adopt_ms", st.push_to_adopt_ms);
  ev.Add("push_to_adopt_max_ms", st.push_to_adopt_max_ms);
  if (st.recent_push_to_adopt_ms.empty()) return;
  ev.Add("push_to_adopt_p50_ms", Quantile(st.recent_push_to_adopt_ms, 0.5));
  ev.Add("push_to_adopt_p99_ms", Quantile(st.recent_push_to_adopt_ms, 0.99));
}

// The banner's codec and H: fixed, or what --codec=auto / --inner_steps=auto choose from.
std::string CodecText(const diloco::worker::WorkerOptions& w) {
  if (!w.cadence.auto_codec) return diloco::kernels::CodecName(w.codec);
  std::vector<std::string> names;
  for (const auto& c : w.cadence.auto_codecs) names.push_back(diloco::kernels::CodecName(c));
  return absl::StrCat("auto (", absl::StrJoin(names, ", "), ")");
}
std::string HText(const diloco::worker::WorkerOptions& w) {
  if (!w.cadence.auto_inner_steps) return absl::StrCat(w.inner_steps);
  return absl::StrCat("auto (", w.inner_steps, "..", w.cadence.inner_steps_max, ")");
}

// Time inside Trainer::Step (busy) over the training loop's wall time so far: the share of its
// time the learner computed rather than synced, logged or waited.
double Utilization(absl::Duration busy, absl::Duration wall) {
  return wall > absl::ZeroDuration() ? absl::FDivDuration(busy, wall) : 0.0;
}

void AddUtilization(diloco::JsonObject& ev, absl::Duration busy, absl::Duration wall) {
  ev.Add("busy_s", absl::ToDoubleSeconds(busy)).Add("wall_s", absl::ToDoubleSeconds(wall));
  ev.Add("utilization", Utilization(busy, wall));
}

absl::StatusOr<std::unique_ptr<diloco::Trainer>> MakeTrainer(
    const diloco::worker::WorkerOptions& w) {
  using diloco::worker::Device;
  const diloco::model::TrainerOptions& to = w.trainer;
  if (w.device == Device::kCpu) return diloco::model::MakeCpuTrainer(to);
  if (w.device == Device::kSynthetic) {
    diloco::model::SyntheticOptions so;
    so.model = to.model;
    so.manifest = w.manifest;
    so.inner_steps = w.inner_steps;
    so.step_time = w.synthetic_step_time;
    so.seed = to.seed;
    so.lr = to.adamw.lr;
    so.tokens_per_step = static_cast<uint64_t>(to.batch_size) *
                         static_cast<uint64_t>(to.seq_len > 0 ? to.seq_len : to.model.context);
    return diloco::model::MakeSyntheticTrainer(std::move(so));
  }
  if (to.gpus < 1) return absl::InvalidArgumentError("--gpus must be at least 1");
#if defined(DILOCO_MODEL_HAVE_CUDA)
  std::string why;
  const int found = diloco::model::CudaDeviceCount(&why);
  if (found < to.gpus)
    return absl::FailedPreconditionError(absl::StrCat(
        "--device=cuda --gpus=", to.gpus, ": ", found, " CUDA GPUs usable on this machine",
        why.empty() ? "" : " (CUDA: ", why, why.empty() ? "" : ")"));
  auto t = diloco::model::MakeCudaTrainer(to);
  if (!t.ok()) return t.status();
  std::fprintf(stderr, "diloco-worker: CUDA trainer on %d GPU(s), %s attention\n", (*t)->gpus(),
               diloco::model::cuda::AttentionName((*t)->attention()));
  return std::unique_ptr<diloco::Trainer>(*std::move(t));
#else
  return absl::FailedPreconditionError(
      "--device=cuda: this build has no CUDA backend (configure with nvcc found, "
      "-DDILOCO_CUDA=ON)");
#endif
}

// The sync client of --servers, joined: theta(0) and every fragment pulled before training
// (or, with --train_unjoined, still joining in the background after --join_timeout). An error
// when it cannot be made or the join fails.
absl::StatusOr<std::unique_ptr<diloco::worker::SyncClient>> JoinFleet(
    const diloco::worker::WorkerOptions& w, diloco::Trainer& tr,
    std::optional<uint64_t> init_checksum, diloco::EventLog& log) {
  using namespace diloco;
  const uint32_t wid = w.worker_id;
  worker::SyncOptions so = *w.sync;
  so.interrupted = [] { return g_stop != 0; };  // SIGINT/SIGTERM end a lockstep wait too
  auto created = worker::SyncClient::Create(so, tr.manifest());
  if (!created.ok()) return created.status();
  std::unique_ptr<worker::SyncClient> sync = *std::move(created);
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
    std::fprintf(stderr,
                 "diloco-worker[%u]: warning: the fleet already had theta(0) and its model "
                 "differs from --init_from=%s: training from the fleet's model, not the file\n",
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
    std::fprintf(stderr, "diloco-worker[%u]: %s; training unsynced meanwhile\n", wid,
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

int main(int argc, char** argv) {
  using namespace diloco;
  SetVersionFlag("diloco-worker");
  worker::ParseWorkerFlags(argc, argv);
  auto options = worker::WorkerOptionsFromFlags();
  if (!options.ok()) return Fail(options.status());
  // One rank of an island (worker/island_run.h): its slice of the batch; rank 0 speaks for it.
  const auto spec = worker::PrepareIsland(*options);
  if (!spec.ok()) return Fail(spec.status());
  const worker::WorkerOptions& w = *options;
  const GptConfig& cfg = w.trainer.model;
  const model::TrainerOptions& to = w.trainer;
  const uint32_t wid = w.worker_id;
  const bool evaluates = w.evaluates() && spec->rank == 0;
  wire::TuneAllocatorForFrames();

  auto trainer = MakeTrainer(w);
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
    init_checksum = ParamsChecksum(p);
  }

  std::unique_ptr<worker::SyncClient> sync;
  if (w.sync) {
    auto s = JoinFleet(w, tr, init_checksum, *log);
    if (!s.ok()) {  // a refused model: name the first differing tensor where this can
      const std::string why =
          ExplainModelRefusal(s.status().message(), tr.manifest(), w.model_spec);
      return Fail(why.empty() ? s.status()
                              : absl::Status(s.status().code(),
                                             absl::StrCat(s.status().message(), "; ", why)));
    }
    sync = *std::move(s);
  }
  // Every rank starts from rank 0's model, joined (or still joining) to the fleet's.
  if (island)
    if (auto st = island->BroadcastAll(w.join_timeout + spec->timeout); !st.ok()) return Fail(st);
  bool joined_logged = !w.log_sync_events || (sync && sync->joined());
  std::signal(SIGTERM, OnSignal);
  std::signal(SIGINT, OnSignal);
  const float eval0 = evaluates ? tr.EvalLoss() : std::nanf("");
  // Synthetic data: the loss of the ideal model on the same held-out tokens, the floor.
  const auto oracle = evaluates ? model::HeldoutOracle(to) : absl::StatusOr<double>(-1.0);
  const std::string floor_str =
      oracle.ok() && *oracle >= 0 ? absl::StrFormat(" (entropy floor %.4f)", *oracle) : "";
  // Every figure is on these targets.
  const int64_t heldout_tokens = evaluates ? model::HeldoutTokens(to) : 0;
  const std::string eval_str =
      evaluates ? absl::StrFormat("held-out loss %.4f on %lld tokens%s", eval0,
                                  static_cast<long long>(heldout_tokens), floor_str)
      : spec->rank != 0
          ? absl::StrCat("island rank ", spec->rank, " of ", spec->size, ": rank 0 evaluates")
          : absl::StrCat("synthetic learner, ", absl::FormatDuration(w.synthetic_step_time),
                         " per step, no held-out evaluation");
  std::fprintf(
      stderr, "diloco-worker[%u]: model %s (%lu params), %s, codec %s, H=%s, %s; %s\n", wid,
      (w.gpt_model ? GptConfigString(cfg) : w.model_spec).c_str(),
      static_cast<unsigned long>(tr.manifest().total_elements()),
      model::Describe(w.lr_schedule).c_str(), CodecText(w).c_str(), HText(w).c_str(),
      sync ? absl::StrCat("plan ", absl::Hex(sync->plan_fingerprint())).c_str() : "no sync",
      eval_str.c_str());

  worker::StateKeeper keeper(w, spec->rank);
  const auto resumed = keeper.Restore(tr);
  if (!resumed.ok()) return Fail(resumed.status());
  if (w.start_step > 0 || !resumed->empty())
    std::fprintf(stderr, "diloco-worker[%u]: resumes its schedule at step %ld of %ld%s%s\n", wid,
                 static_cast<long>(w.start_step), static_cast<long>(w.steps),
                 w.resumed_elapsed > absl::ZeroDuration()
                     ? absl::StrCat(" after ", absl::FormatDuration(w.resumed_elapsed)).c_str()
                     : "",
                 resumed->empty() ? "" : absl::StrCat(", with ", *resumed).c_str());
  const int64_t max_steps = w.steps;
  const int64_t eval_every = w.eval_every;
  const absl::Time start = absl::Now();
  // The run's clock (--duration, the schedule): a learner resumed from --state_dir goes on
  // from the training time it had.
  const absl::Time clock0 = start - w.resumed_elapsed;
  const absl::Time end = clock0 + w.duration;
  const absl::Duration delay = w.step_delay;
  const double slowdown = w.step_slowdown;
  const absl::Duration period = w.progress_interval;
  absl::Time next_progress = start + period;
  uint64_t tokens = 0, tokens_at_last = 0;
  absl::Time last = start;
  double loss_ema = 0;
  absl::Duration busy;          // inside Trainer::Step
  int64_t step = w.start_step;  // of the schedule; this run trains step - start_step of them
  for (;; ++step) {
    const absl::Time t0 = absl::Now();
    bool stop = g_stop || (max_steps > 0 && step >= max_steps) || t0 >= end;
    float lr = model::LrAt(w.lr_schedule, step + 1, t0 - clock0);
    if (island) {  // rank 0's order, and what its sync client changed, on every rank
      auto order = island->Exchange({stop, lr});
      if (!order.ok()) return Fail(order.status());
      stop = order->stop, lr = order->lr;
      // Compared here, where every rank holds what rank 0's sync client wrote up to now (after
      // the step, rank 0 may hold an adoption the others receive with this order).
      if (step > w.start_step && step % w.inner_steps == 0)
        if (auto st = island->Check(step); !st.ok()) return Fail(st);
    }
    if (stop) break;
    tr.SetLearningRate(lr);
    const float loss = tr.Step();
    busy += absl::Now() - t0;
    if (absl::Status e = tr.error(); !e.ok()) return Fail(e);
    if (slowdown > 1) absl::SleepFor((absl::Now() - t0) * (slowdown - 1));
    if (delay > absl::ZeroDuration()) absl::SleepFor(delay);
    const absl::Duration dt = absl::Now() - t0;
    tokens += tr.tokens_per_step() * spec->size;  // the island's, all ranks together
    loss_ema = Ema(loss_ema, loss, 0.1);
    if (sync) {
      // Parameters reached piece by piece, only where AfterStep reads or writes them (a GPU
      // trainer copies just those pieces to the host and back).
      sync->AfterStep(
          [&tr, island](uint64_t offset, uint64_t n) {
            return island ? island->Range(offset, n) : tr.ParamRange(offset, n);
          },
          tr.tokens_per_step() * spec->size, dt);
      if (auto st = keeper.AfterStep(tr, step + 1, sync->stats().applied, absl::Now() - clock0);
          !st.ok())
        std::fprintf(stderr, "diloco-worker[%u]: --state_dir: %s\n", wid,
                     std::string(st.message()).c_str());
      WriteSyncEvents(*sync, wid, w.log_sync_events, *log);
      if (!joined_logged && sync->joined()) {  // joined in the background
        joined_logged = true;
        JsonObject ev;
        ev.Add("event", "joined").Add("worker", uint64_t{wid}).Add("step", step + 1);
        ev.Add("params_checksum", ParamsChecksum(tr.params()));
        log->Write(ev);
      }
    }
    if (eval_every > 0 && (step + 1) % eval_every == 0) {  // curves of the convergence study
      JsonObject ev;
      ev.Add("event", "eval").Add("worker", uint64_t{wid}).Add("step", step + 1);
      ev.Add("tokens", tokens).Add("elapsed_s", absl::ToDoubleSeconds(absl::Now() - start));
      ev.Add("loss_local", static_cast<double>(tr.EvalLoss()));
      if (sync && sync->joined())
        ev.Add("loss_global", static_cast<double>(EvalOnTrainer(tr, sync->global_params())));
      log->Write(ev);
    }
    const absl::Time now = absl::Now();
    if (now >= next_progress) {
      const double tps = (tokens - tokens_at_last) / absl::ToDoubleSeconds(now - last);
      tokens_at_last = tokens;
      last = now;
      next_progress = now + period;
      JsonObject ev;
      ev.Add("event", "progress").Add("worker", uint64_t{wid}).Add("step", step + 1);
      ev.Add("elapsed_s", absl::ToDoubleSeconds(now - start));
      ev.Add("loss", loss_ema).Add("tokens_per_s", tps).Add("tokens", tokens);
      ev.Add("lr", static_cast<double>(lr));
      AddUtilization(ev, busy, now - start);
      std::string extra;
      if (sync) {
        const auto st = sync->stats();
        extra = absl::StrCat(" | joined ", st.joined, "/", st.versions.size(), " H ",
                             st.inner_steps_now, " ", kernels::CodecName(st.codec_now), " pushes ",
                             st.pushes, " applied ", st.applied, " adopted ", st.adoptions,
                             " stale ", st.stale, " resent ", st.resends, " reanchored ",
                             st.reanchors, " staleness ",
                             absl::StrFormat("%.2f (max %d)", st.mean_staleness, st.max_staleness),
                             " sent ", st.bytes_sent >> 10, "KiB recv ", st.bytes_received >> 10,
                             "KiB sync/step ", absl::StrFormat("%.0fus", st.after_step_us),
                             " util ", absl::StrFormat("%.3f", Utilization(busy, now - start)),
                             " versions [", absl::StrJoin(st.versions, ","), "]");
        ev.Add("pushes", st.pushes).Add("applied", st.applied).Add("adoptions", st.adoptions);
        ev.Add("stale", st.stale).Add("duplicates", st.duplicates).Add("refused", st.refused);
        ev.Add("staleness", st.mean_staleness).Add("max_staleness", st.max_staleness);
        AddSyncFigures(ev, st);
        ev.Add("resends", st.resends).Add("reconnects", st.reconnects);
        ev.Add("reanchors", st.reanchors).Add("reanchored_steps", st.reanchored_steps);
        ev.Add("shard_restarts", st.shard_restarts).Add("unacked", uint64_t{st.unacked});
        ev.Add("joined", uint64_t{st.joined}).Add("inner_steps", uint64_t{st.inner_steps_now});
        ev.Add("step_time_us", st.step_time_us).Add("fleet_step_time_us", st.fleet_step_time_us);
        ev.Add("after_step_us", st.after_step_us).Add("after_step_max_us", st.after_step_max_us);
        ev.Add("versions", st.versions);
      }
      std::fprintf(stderr, "worker %u step %6ld loss %.4f tok/s %8.0f%s\n", wid,
                   static_cast<long>(step + 1), loss_ema, tps, extra.c_str());
      log->Write(ev);
    }
  }
  const absl::Duration wall = absl::Now() - start;  // of the training loop, without the drain
  if (sync) {
    if (auto st = sync->Drain(tr.params(), w.drain_timeout); !st.ok())
      std::fprintf(stderr, "diloco-worker[%u]: %s\n", wid, std::string(st.message()).c_str());
    WriteSyncEvents(*sync, wid, w.log_sync_events, *log);
  }
  if (island) {  // what the drain adopted, on every rank; then the ranks must be identical
    if (auto st = island->BroadcastAll(w.drain_timeout + spec->timeout); !st.ok()) return Fail(st);
    if (auto st = island->Check(step); !st.ok()) return Fail(st);
  }
  if (auto st = keeper.Finish(tr, step); !st.ok())
    std::fprintf(stderr, "diloco-worker[%u]: --state_dir: %s\n", wid,
                 std::string(st.message()).c_str());
  const float eval_local = evaluates ? tr.EvalLoss() : std::nanf("");
  JsonObject done;
  done.Add("event", "done").Add("worker", uint64_t{wid}).Add("steps", step - w.start_step);
  if (w.start_step > 0) done.Add("start_step", w.start_step);
  if (island) {
    done.Add("island_rank", int64_t{spec->rank}).Add("island_size", int64_t{spec->size});
    done.Add("island_floats_moved", island->floats_moved());
    // Gradients and loss, both all-reduces of each step: what the island adds to a step.
    const island::Island& is = *island_run->island;
    done.Add("island_allreduce_ms_per_step",
             is.reduces() ? 2 * absl::ToDoubleMilliseconds(is.reduce_time()) / is.reduces() : 0.0);
  }
  done.Add("params_checksum", ParamsChecksum(tr.params()));
  if (evaluates)
    done.Add("eval_local", static_cast<double>(eval_local))
        .Add("eval_initial", static_cast<double>(eval0));
  AddUtilization(done, busy, wall);
  std::string global_str;
  if (sync) {
    const auto st = sync->stats();
    done.Add("pushes", st.pushes).Add("applied", st.applied).Add("stale", st.stale);
    done.Add("resends", st.resends).Add("joined", uint64_t{st.joined});
    done.Add("join_asks", st.join_asks).Add("reasks", st.reasks);
    done.Add("init_resumed", st.init_resumed).Add("init_bytes_sent", st.init_bytes_sent);
    done.Add("reanchors", st.reanchors).Add("reanchored_steps", st.reanchored_steps);
    done.Add("reconnects", st.reconnects).Add("errors", st.errors).Add("refused", st.refused);
    done.Add("after_step_us", st.after_step_us).Add("step_time_us", st.step_time_us);
    AddSyncFigures(done, st);
  }
  if (evaluates) done.Add("heldout_tokens", heldout_tokens);
  if (oracle.ok() && *oracle >= 0) done.Add("entropy_floor", *oracle);
  int rc = 0;
  if (const std::string& out = w.save_model; !out.empty()) {
    // The local model, in diloco-ctl export's names and layout.
    std::map<std::string, std::string> meta = ModelFileMetadata(cfg, tr.manifest());
    if (!w.gpt_model) meta["diloco.model"] = w.model_spec;
    meta["diloco.source"] = absl::StrCat("diloco-worker ", wid, " local model");
    meta["diloco.steps"] = absl::StrCat(step);
    if (auto st = model::WriteSafetensors(out, tr.manifest(), tr.params(), meta); !st.ok())
      rc = Fail(st);
    else
      done.Add("saved_model", out);
  }
  if (sync && evaluates) {
    // Last: the local parameters are overwritten by the global ones, not copied aside.
    const float g = EvalOnTrainer(tr, sync->global_params(), /*restore=*/false);
    if (std::isfinite(g)) {
      done.Add("eval_global", static_cast<double>(g));
      global_str = absl::StrFormat(", global model %.4f", g);
    }
  }
  AddMemory(done, tr.params().size());
  log->Write(done);
  const std::string util_str =
      absl::StrFormat("utilization %.3f (%.1f s in steps of %.1f s)", Utilization(busy, wall),
                      absl::ToDoubleSeconds(busy), absl::ToDoubleSeconds(wall));
  if (evaluates)
    std::fprintf(stderr,
                 "diloco-worker[%u]: done after %ld steps, %s; held-out loss %.4f -> %.4f on "
                 "%lld tokens%s%s\n",
                 wid, static_cast<long>(step - w.start_step), util_str.c_str(), eval0, eval_local,
                 static_cast<long long>(heldout_tokens), global_str.c_str(), floor_str.c_str());
  else
    std::fprintf(stderr, "diloco-worker[%u]: done after %ld steps, %s\n", wid,
                 static_cast<long>(step - w.start_step), util_str.c_str());
  return rc;
}
