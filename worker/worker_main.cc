// diloco-worker: one learner. Trains the GPT locally (AdamW, H inner steps), and through the
// SyncClient pushes quantised deltas to the shards and adopts the fragments they send back,
// without the training loop ever waiting on the network. --device=synthetic swaps the GPT for a
// learner that only waits and perturbs its parameters (worker/model/synthetic_trainer.h), to
// drive the sync path at fleet scale (benchmarks/fleet/diloco-bench).
#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <optional>
#include <span>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/checksum.h"
#include "common/event_log.h"
#include "common/model_spec.h"
#include "common/process_memory.h"
#include "schema/curve.h"
#include "schema/transport.h"
#include "worker/model/cpu_trainer.h"
#if defined(DILOCO_MODEL_HAVE_CUDA)
#include "worker/model/cuda/cuda_trainer.h"
#endif
#include "worker/model/evaluate.h"
#include "worker/model/lr_schedule.h"
#include "worker/model/safetensors.h"
#include "worker/model/synthetic_trainer.h"
#include "worker/sync_client.h"

ABSL_FLAG(std::string, servers, "",
          "comma-separated shard endpoints, shard i at position i (empty: train without sync)");
ABSL_FLAG(uint32_t, worker_id, 0, "this worker's id (unique in the fleet)");
ABSL_FLAG(uint64_t, generation, 0, "worker generation (0: from the clock, new on each start)");
ABSL_FLAG(uint32_t, fragments, 4, "number of fragments (same as the servers')");
ABSL_FLAG(std::string, model, "small", "model preset or spec (same as the servers')");
ABSL_FLAG(std::string, codec, "int8:256", "push codec: fp32, bf16, fp8, int8, int4 [:block]");
ABSL_FLAG(uint32_t, inner_steps, 50, "H: inner steps between pushes of a fragment");
ABSL_FLAG(bool, dylu, false, "Dynamic Local Updates: scale H by this worker's relative speed");
ABSL_FLAG(bool, stream, true, "stagger fragments' pushes across the H steps");
ABSL_FLAG(std::string, adopt, "keep",
          "adoption of new global values: keep (local = global + the steps taken since the "
          "push) or lerp (local = global + adopt_alpha*(local - global); alpha 0 replaces)");
ABSL_FLAG(double, adopt_alpha, 0.0, "--adopt=lerp: local = global + alpha*(local - global)");
ABSL_FLAG(bool, lockstep, false,
          "deterministic mode: after a push, wait for its answer and adopt it before the next "
          "step (a fixed sequence of steps and rounds; with the shards' --quorum = workers, "
          "synchronous DiLoCo)");
ABSL_FLAG(bool, error_feedback, true,
          "keep each push's quantisation error and add it to the next push (false: study only)");
ABSL_FLAG(int64_t, eval_every, 0,
          "every N inner steps, write an \"eval\" event with the held-out loss of the local model "
          "and of the last adopted global one (0: only at the end)");
ABSL_FLAG(int64_t, steps, 0, "inner steps to run (0: until --duration or a signal)");
ABSL_FLAG(absl::Duration, duration, absl::InfiniteDuration(), "stop after this long");
ABSL_FLAG(int, batch, 8, "sequences per inner step");
ABSL_FLAG(int, seq_len, 0, "tokens per sequence (0: the model's context)");
ABSL_FLAG(double, lr, 1e-3, "AdamW learning rate (the peak of --lr_schedule)");
ABSL_FLAG(std::string, lr_schedule, "auto",
          "auto (cosine when --steps or --duration bounds the run, constant otherwise), "
          "constant, cosine (decay to --min_lr_fraction of --lr over the run, following the "
          "larger of steps/--steps and elapsed/--duration) or wsd (the peak, then a linear "
          "decay over the last --lr_cooldown of the run)");
ABSL_FLAG(int, warmup_steps, 0, "linear learning-rate warm-up over this many inner steps");
ABSL_FLAG(double, min_lr_fraction, 0.1, "the decay's floor, as a fraction of --lr");
ABSL_FLAG(double, lr_cooldown, 0.2, "--lr_schedule=wsd: the last fraction of the run decays");
ABSL_FLAG(double, weight_decay, 0.1, "AdamW weight decay");
ABSL_FLAG(uint64_t, seed, 1234, "seed of the batch order (and of theta(0) unless --init_seed)");
ABSL_FLAG(uint64_t, init_seed, 0,
          "seed of theta(0) (0: --seed). Workers of one fleet that train with different --seed "
          "and one --init_seed start from the same theta(0), whichever Init reaches a shard first");
ABSL_FLAG(std::string, init_from, "",
          "start from this model: a .safetensors file in the project's layout (diloco-ctl export, "
          "--save_model) or Hugging Face's GPT-2 layout, or a diloco-ctl export --format=hf "
          "directory. Uploaded as theta(0) where the fleet has none; a fleet that already has "
          "theta(0) keeps it, and a warning says so");
ABSL_FLAG(std::string, data, "synthetic",
          "synthetic, bin:PATH (llm.c token file) or text:PATH (bytes)");
ABSL_FLAG(int, num_workers, 0, "workers sharing the data (0: the number of --worker_id + 1)");
ABSL_FLAG(int, threads, 1, "CPU threads for the matrix products");
ABSL_FLAG(std::string, device, "cpu",
          "cpu; cuda: train on this node's GPUs (cuBLAS; --gpus data-parallel with NCCL); or "
          "synthetic: no model math, each step waits --synthetic_step_time and moves 1/H of the "
          "parameters by a seeded perturbation (benchmarks; no held-out evaluation)");
ABSL_FLAG(absl::Duration, synthetic_step_time, absl::Milliseconds(100),
          "--device=synthetic: the time one inner step waits (a GPU island computing)");
ABSL_FLAG(int, gpus, 1, "--device=cuda: GPUs of this worker (--batch sequences on each)");
ABSL_FLAG(absl::Duration, step_delay, absl::ZeroDuration(),
          "test flag: extra time per inner step (a slower machine)");
ABSL_FLAG(double, step_slowdown, 1.0,
          "test flag: each inner step takes this many times its compute time (sleeps the rest): "
          "a device this many times slower, whatever the speed of this machine (>= 1)");
ABSL_FLAG(absl::Duration, progress_interval, absl::Seconds(5), "progress line period");
ABSL_FLAG(int, eval_batches, 4, "held-out batches per evaluation");
ABSL_FLAG(std::string, metrics_jsonl, "", "append JSON-lines events here");
ABSL_FLAG(std::string, save_model, "",
          "at the end (after the drain), write this worker's local model to this .safetensors "
          "file, with the tensor names and layout of diloco-ctl export (so an unsynced baseline "
          "is evaluated like the fleet's export: diloco-ctl eval --params=FILE)");
ABSL_FLAG(absl::Duration, join_timeout, absl::Seconds(60),
          "wait this long for the join before training starts");
ABSL_FLAG(bool, train_unjoined, true,
          "if the join is not done by --join_timeout: train unsynced and keep joining in the "
          "background (false: exit with an error)");
ABSL_FLAG(bool, log_sync_events, false,
          "also write one JSON line per sync event (joined, push, applied, duplicate, stale, "
          "refused, shard_restart) to --metrics_jsonl");
ABSL_FLAG(absl::Duration, heartbeat, absl::Milliseconds(500), "heartbeat period per shard");
ABSL_FLAG(absl::Duration, shard_timeout, absl::Seconds(3),
          "a shard silent this long is reconnected (with exponential backoff)");
ABSL_FLAG(bool, control_channel, true,
          "heartbeats on a second connection per shard, never behind a payload (off only to "
          "diagnose: on a slow link a long transfer then reads as a dead shard)");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(10),
          "on a clean stop, wait for in-flight pushes to be answered until this long passes with "
          "no answer");
ABSL_FLAG(std::string, curve_server_key, "",
          "CURVE: the shards' public key (Z85 text or a file holding it); empty: no encryption");
ABSL_FLAG(std::string, curve_secret_key_file, "",
          "CURVE: this worker's secret key file (diloco-keygen); its public key must be listed "
          "for --worker_id in the shards' --curve_authorized_keys");

namespace {

volatile std::sig_atomic_t g_stop = 0;
void OnSignal(int) { g_stop = 1; }

int Fail(const absl::Status& s) {
  std::fprintf(stderr, "diloco-worker: %s\n", std::string(s.message()).c_str());
  return 2;
}

absl::StatusOr<diloco::data::DataOptions> ParseData(const std::string& spec, int index, int n) {
  diloco::data::DataOptions d;
  d.worker_index = index;
  d.num_workers = n;
  if (spec == "synthetic") return d;
  std::vector<std::string> kv = absl::StrSplit(spec, absl::MaxSplits(':', 1));
  if (kv.size() == 2 && kv[0] == "bin") {
    d.kind = diloco::data::DataKind::kTokenFile;
    d.path = kv[1];
    return d;
  }
  if (kv.size() == 2 && kv[0] == "text") {
    d.kind = diloco::data::DataKind::kTextFile;
    d.path = kv[1];
    return d;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--data=", spec, ": expected synthetic, bin:PATH or text:PATH"));
}

// Fills the CURVE keys of `so` from the flags: both flags or neither.
absl::Status SetCurveKeys(diloco::worker::SyncOptions* so) {
  auto keys = diloco::wire::CurveClientKeysFrom(absl::GetFlag(FLAGS_curve_server_key),
                                                absl::GetFlag(FLAGS_curve_secret_key_file));
  if (!keys.ok()) return keys.status();
  if (!keys->has_value()) return absl::OkStatus();
  so->curve_server_key = (*keys)->server_public_key;
  so->curve_public_key = (*keys)->public_key;
  so->curve_secret_key = (*keys)->secret_key;
  return absl::OkStatus();
}

// 48 bits of the parameters' checksum: exact as a JSON number (a double).
uint64_t ParamsChecksum(std::span<const float> p) {
  return diloco::Checksum64(p.data(), p.size_bytes()) & ((uint64_t{1} << 48) - 1);
}

void WriteSyncEvents(diloco::worker::SyncClient& sync, uint32_t wid, diloco::EventLog& log) {
  const auto events = sync.TakeEvents();
  if (!absl::GetFlag(FLAGS_log_sync_events)) return;
  for (const auto& e : events) {
    diloco::JsonObject ev;
    ev.Add("event", diloco::worker::SyncEventName(e.kind)).Add("worker", uint64_t{wid});
    ev.Add("shard", uint64_t{e.shard});
    if (e.kind != diloco::worker::SyncEvent::kShardRestart) {
      ev.Add("fragment", uint64_t{e.fragment}).Add("seq", e.seq);
      ev.Add("base_version", e.base_version).Add("version", e.version);
    }
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
  ev.Add("updates_full", st.updates_full).Add("updates_delta", st.updates_delta);
  ev.Add("download_mismatches", st.download_mismatches);
  ev.Add("push_to_adopt_ms", st.push_to_adopt_ms);
  ev.Add("push_to_adopt_max_ms", st.push_to_adopt_max_ms);
  if (st.recent_push_to_adopt_ms.empty()) return;
  ev.Add("push_to_adopt_p50_ms", Quantile(st.recent_push_to_adopt_ms, 0.5));
  ev.Add("push_to_adopt_p99_ms", Quantile(st.recent_push_to_adopt_ms, 0.99));
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
    const std::string& device, const diloco::model::TrainerOptions& to) {
  if (device == "cpu") return diloco::model::MakeCpuTrainer(to);
  if (device == "synthetic") {
    diloco::model::SyntheticOptions so;
    so.model = to.model;
    so.inner_steps = absl::GetFlag(FLAGS_inner_steps);
    so.step_time = absl::GetFlag(FLAGS_synthetic_step_time);
    so.seed = to.seed;
    so.lr = to.adamw.lr;
    so.tokens_per_step = static_cast<uint64_t>(to.batch_size) *
                         static_cast<uint64_t>(to.seq_len > 0 ? to.seq_len : to.model.context);
    return diloco::model::MakeSyntheticTrainer(std::move(so));
  }
  if (device != "cuda")
    return absl::InvalidArgumentError(
        absl::StrCat("--device=", device, ": expected cpu, cuda or synthetic"));
  if (to.gpus < 1) return absl::InvalidArgumentError("--gpus must be at least 1");
#if defined(DILOCO_MODEL_HAVE_CUDA)
  const int found = diloco::model::CudaDeviceCount();
  if (found < to.gpus)
    return absl::FailedPreconditionError(absl::StrCat("--device=cuda --gpus=", to.gpus, ": ", found,
                                                      " CUDA GPUs usable on this machine"));
  auto t = diloco::model::MakeCudaTrainer(to);
  if (!t.ok()) return t.status();
  return std::unique_ptr<diloco::Trainer>(*std::move(t));
#else
  return absl::FailedPreconditionError(
      "--device=cuda: this build has no CUDA backend (configure with nvcc found, "
      "-DDILOCO_CUDA=ON)");
#endif
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("diloco-worker --servers=tcp://h:p,... --worker_id=N [flags]");
  absl::ParseCommandLine(argc, argv);
  using namespace diloco;
  wire::TuneAllocatorForFrames();

  auto cfg = ParseGptConfig(absl::GetFlag(FLAGS_model));
  if (!cfg.ok()) return Fail(cfg.status());
  auto codec = kernels::ParseCodec(absl::GetFlag(FLAGS_codec));
  if (!codec.ok()) return Fail(codec.status());
  if (const double k = absl::GetFlag(FLAGS_step_slowdown); !(k >= 1 && std::isfinite(k)))
    return Fail(absl::InvalidArgumentError(
        absl::StrCat("--step_slowdown=", k, ": expected a finite factor >= 1")));
  const uint32_t wid = absl::GetFlag(FLAGS_worker_id);
  const int nw = absl::GetFlag(FLAGS_num_workers) > 0 ? absl::GetFlag(FLAGS_num_workers)
                                                      : static_cast<int>(wid) + 1;
  auto data = ParseData(absl::GetFlag(FLAGS_data), static_cast<int>(wid) % nw, nw);
  if (!data.ok()) return Fail(data.status());
  // The synthetic learner has no model to evaluate: no held-out figures at all.
  const bool evaluates = absl::GetFlag(FLAGS_device) != "synthetic";
  if (!evaluates && absl::GetFlag(FLAGS_eval_every) > 0)
    return Fail(absl::InvalidArgumentError(
        "--eval_every needs a model to evaluate: --device=synthetic has none (use 0)"));

  model::TrainerOptions to;
  to.model = *cfg;
  to.batch_size = absl::GetFlag(FLAGS_batch);
  to.seq_len = absl::GetFlag(FLAGS_seq_len);
  to.adamw.lr = static_cast<float>(absl::GetFlag(FLAGS_lr));
  to.adamw.weight_decay = static_cast<float>(absl::GetFlag(FLAGS_weight_decay));
  auto lr_schedule = model::MakeLrSchedule(
      absl::GetFlag(FLAGS_lr_schedule), to.adamw.lr, absl::GetFlag(FLAGS_warmup_steps),
      static_cast<float>(absl::GetFlag(FLAGS_min_lr_fraction)), absl::GetFlag(FLAGS_steps),
      absl::GetFlag(FLAGS_duration), absl::GetFlag(FLAGS_lr_cooldown));
  if (!lr_schedule.ok()) return Fail(lr_schedule.status());
  to.seed = absl::GetFlag(FLAGS_seed);
  to.init_seed = absl::GetFlag(FLAGS_init_seed) != 0 ? absl::GetFlag(FLAGS_init_seed) : to.seed;
  to.data = *data;
  to.eval_batches = absl::GetFlag(FLAGS_eval_batches);
  to.threads = absl::GetFlag(FLAGS_threads);
  to.gpus = absl::GetFlag(FLAGS_gpus);
  auto trainer = MakeTrainer(absl::GetFlag(FLAGS_device), to);
  if (!trainer.ok()) return Fail(trainer.status());
  Trainer& tr = **trainer;
  auto log = EventLog::Open(absl::GetFlag(FLAGS_metrics_jsonl));
  if (!log.ok()) return Fail(log.status());
  std::optional<uint64_t> init_checksum;  // of --init_from's parameters
  if (const std::string from = absl::GetFlag(FLAGS_init_from); !from.empty()) {
    auto flat = model::ReadModelForInit(from, tr.manifest());
    if (!flat.ok()) return Fail(flat.status());
    std::span<float> p = tr.params();
    std::copy(flat->begin(), flat->end(), p.begin());
    init_checksum = ParamsChecksum(*flat);
  }
  if (const std::string out = absl::GetFlag(FLAGS_save_model); !out.empty())
    if (auto st = model::CheckWritable(out); !st.ok()) return Fail(st);  // before, not after, a run

  std::unique_ptr<worker::SyncClient> sync;
  const std::string servers = absl::GetFlag(FLAGS_servers);
  if (!servers.empty()) {
    worker::SyncOptions so;
    so.servers = absl::StrSplit(servers, ',', absl::SkipEmpty());
    so.worker_id = wid;
    so.generation = absl::GetFlag(FLAGS_generation);
    so.num_fragments = absl::GetFlag(FLAGS_fragments);
    so.codec = *codec;
    so.inner_steps = absl::GetFlag(FLAGS_inner_steps);
    so.dylu = absl::GetFlag(FLAGS_dylu);
    so.stream = absl::GetFlag(FLAGS_stream);
    so.adopt_alpha = static_cast<float>(absl::GetFlag(FLAGS_adopt_alpha));
    const std::string adopt = absl::GetFlag(FLAGS_adopt);
    if (adopt != "keep" && adopt != "lerp")
      return Fail(
          absl::InvalidArgumentError(absl::StrCat("--adopt=", adopt, ": expected keep or lerp")));
    so.adopt =
        adopt == "keep" ? worker::SyncOptions::Adopt::kKeep : worker::SyncOptions::Adopt::kLerp;
    if (so.adopt == worker::SyncOptions::Adopt::kKeep && so.adopt_alpha != 0.0f)
      return Fail(absl::InvalidArgumentError("--adopt_alpha applies to --adopt=lerp only"));
    so.lockstep = absl::GetFlag(FLAGS_lockstep);
    so.error_feedback = absl::GetFlag(FLAGS_error_feedback);
    so.heartbeat = absl::GetFlag(FLAGS_heartbeat);
    so.shard_timeout = absl::GetFlag(FLAGS_shard_timeout);
    so.control_channel = absl::GetFlag(FLAGS_control_channel);
    if (so.heartbeat <= absl::ZeroDuration() || so.shard_timeout <= so.heartbeat)
      return Fail(absl::InvalidArgumentError(
          "--heartbeat must be positive and shorter than --shard_timeout"));
    if (auto st = SetCurveKeys(&so); !st.ok()) return Fail(st);
    auto s = worker::SyncClient::Create(so, tr.manifest());
    if (!s.ok()) return Fail(s.status());
    sync = std::move(*s);
    const uint64_t initial = ParamsChecksum(tr.params());
    const absl::Time t0 = absl::Now();
    JsonObject setup;  // what the trainer and the sync client hold before any traffic
    setup.Add("event", "setup").Add("worker", uint64_t{wid});
    AddMemory(setup, tr.params().size());
    log->Write(setup);
    const absl::Status st = sync->Join(tr.params(), absl::GetFlag(FLAGS_join_timeout));
    // The join pulled every fragment in fp32 at once (4 bytes per parameter of frames, freed but
    // kept mapped by TuneAllocatorForFrames): handed back, as pushes never need that much.
    wire::TrimFrameHeap();
    if (st.ok() && init_checksum && ParamsChecksum(tr.params()) != *init_checksum)
      std::fprintf(stderr,
                   "diloco-worker[%u]: warning: the fleet already had theta(0) and its model "
                   "differs from --init_from=%s: training from the fleet's model, not the file\n",
                   wid, absl::GetFlag(FLAGS_init_from).c_str());
    if (st.ok() && absl::GetFlag(FLAGS_log_sync_events)) {
      JsonObject ev;
      ev.Add("event", "joined").Add("worker", uint64_t{wid});
      AddMemory(ev, tr.params().size());
      ev.Add("params_checksum", ParamsChecksum(tr.params()));
      ev.Add("initial_checksum", initial);
      ev.Add("join_ms", absl::ToDoubleMilliseconds(absl::Now() - t0));
      log->Write(ev);
    } else if (absl::IsDeadlineExceeded(st) && absl::GetFlag(FLAGS_train_unjoined)) {
      std::fprintf(stderr, "diloco-worker[%u]: %s; training unsynced meanwhile\n", wid,
                   std::string(st.message()).c_str());
      JsonObject ev;
      ev.Add("event", "join_pending").Add("worker", uint64_t{wid});
      ev.Add("joined", uint64_t{sync->stats().joined});
      if (absl::GetFlag(FLAGS_log_sync_events)) log->Write(ev);
    } else if (!st.ok()) {
      return Fail(st);
    }
  }
  bool joined_logged = !absl::GetFlag(FLAGS_log_sync_events) || (sync && sync->joined());
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
                : absl::StrCat("synthetic learner, ",
                               absl::FormatDuration(absl::GetFlag(FLAGS_synthetic_step_time)),
                               " per step, no held-out evaluation");
  std::fprintf(
      stderr, "diloco-worker[%u]: model %s (%lu params), %s, codec %s, H=%u, %s; %s\n", wid,
      GptConfigString(*cfg).c_str(), static_cast<unsigned long>(tr.manifest().total_elements()),
      model::Describe(*lr_schedule).c_str(), kernels::CodecName(*codec).c_str(),
      absl::GetFlag(FLAGS_inner_steps),
      sync ? absl::StrCat("plan ", absl::Hex(sync->plan_fingerprint())).c_str() : "no sync",
      eval_str.c_str());

  const int64_t max_steps = absl::GetFlag(FLAGS_steps);
  const int64_t eval_every = absl::GetFlag(FLAGS_eval_every);
  const absl::Time start = absl::Now();
  const absl::Time end = start + absl::GetFlag(FLAGS_duration);
  const absl::Duration delay = absl::GetFlag(FLAGS_step_delay);
  const double slowdown = absl::GetFlag(FLAGS_step_slowdown);
  const absl::Duration period = absl::GetFlag(FLAGS_progress_interval);
  absl::Time next_progress = start + period;
  uint64_t tokens = 0, tokens_at_last = 0;
  absl::Time last = start;
  double loss_ema = 0;
  absl::Duration busy;  // inside Trainer::Step
  int64_t step = 0;
  for (; !g_stop && (max_steps == 0 || step < max_steps) && absl::Now() < end; ++step) {
    const absl::Time t0 = absl::Now();
    const float lr = model::LrAt(*lr_schedule, step + 1, t0 - start);
    tr.SetLearningRate(lr);
    const float loss = tr.Step();
    busy += absl::Now() - t0;
    if (absl::Status e = tr.error(); !e.ok()) return Fail(e);
    if (slowdown > 1) absl::SleepFor((absl::Now() - t0) * (slowdown - 1));
    if (delay > absl::ZeroDuration()) absl::SleepFor(delay);
    const absl::Duration dt = absl::Now() - t0;
    tokens += tr.tokens_per_step();
    loss_ema = loss_ema == 0 ? loss : 0.9 * loss_ema + 0.1 * loss;
    if (sync) {
      // Parameters reached piece by piece, only where AfterStep reads or writes them (a GPU
      // trainer copies just those pieces to the host and back).
      sync->AfterStep([&tr](uint64_t offset, uint64_t n) { return tr.ParamRange(offset, n); },
                      tr.tokens_per_step(), dt);
      WriteSyncEvents(*sync, wid, *log);
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
                             st.inner_steps_now, " pushes ", st.pushes, " applied ", st.applied,
                             " adopted ", st.adoptions, " stale ", st.stale, " resent ", st.resends,
                             " staleness ",
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
        ev.Add("shard_restarts", st.shard_restarts).Add("unacked", uint64_t{st.unacked});
        ev.Add("joined", uint64_t{st.joined}).Add("inner_steps", uint64_t{st.inner_steps_now});
        ev.Add("step_time_us", st.step_time_us).Add("fleet_step_time_us", st.fleet_step_time_us);
        ev.Add("after_step_us", st.after_step_us).Add("after_step_max_us", st.after_step_max_us);
        ev.AddRaw("versions", absl::StrCat("[", absl::StrJoin(st.versions, ","), "]"));
      }
      std::fprintf(stderr, "worker %u step %6ld loss %.4f tok/s %8.0f%s\n", wid,
                   static_cast<long>(step + 1), loss_ema, tps, extra.c_str());
      log->Write(ev);
    }
  }
  const absl::Duration wall = absl::Now() - start;  // of the training loop, without the drain
  if (sync) {
    if (auto st = sync->Drain(tr.params(), absl::GetFlag(FLAGS_drain_timeout)); !st.ok())
      std::fprintf(stderr, "diloco-worker[%u]: %s\n", wid, std::string(st.message()).c_str());
    WriteSyncEvents(*sync, wid, *log);
  }
  const float eval_local = evaluates ? tr.EvalLoss() : std::nanf("");
  JsonObject done;
  done.Add("event", "done").Add("worker", uint64_t{wid}).Add("steps", step);
  if (evaluates)
    done.Add("eval_local", static_cast<double>(eval_local))
        .Add("eval_initial", static_cast<double>(eval0));
  AddUtilization(done, busy, wall);
  std::string global_str;
  if (sync) {
    const auto st = sync->stats();
    done.Add("pushes", st.pushes).Add("applied", st.applied).Add("stale", st.stale);
    done.Add("resends", st.resends).Add("joined", uint64_t{st.joined});
    done.Add("reconnects", st.reconnects).Add("errors", st.errors).Add("refused", st.refused);
    done.Add("after_step_us", st.after_step_us).Add("step_time_us", st.step_time_us);
    AddSyncFigures(done, st);
  }
  if (evaluates) done.Add("heldout_tokens", heldout_tokens);
  if (oracle.ok() && *oracle >= 0) done.Add("entropy_floor", *oracle);
  int rc = 0;
  if (const std::string out = absl::GetFlag(FLAGS_save_model); !out.empty()) {
    // The local model, in diloco-ctl export's names and layout.
    std::map<std::string, std::string> meta = ModelFileMetadata(*cfg, tr.manifest());
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
                 wid, static_cast<long>(step), util_str.c_str(), eval0, eval_local,
                 static_cast<long long>(heldout_tokens), global_str.c_str(), floor_str.c_str());
  else
    std::fprintf(stderr, "diloco-worker[%u]: done after %ld steps, %s\n", wid,
                 static_cast<long>(step), util_str.c_str());
  return rc;
}
