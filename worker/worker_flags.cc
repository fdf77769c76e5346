#include "worker/worker_flags.h"

#include <cmath>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/plan_flags.h"
#include "schema/curve.h"
#include "worker/cadence.h"
#include "worker/model/safetensors.h"
#include "worker/resume_state.h"

namespace diloco::worker {
namespace {

constexpr Choice<Device> kDevices[] = {
    {"cpu", Device::kCpu}, {"cuda", Device::kCuda}, {"synthetic", Device::kSynthetic}};
constexpr Choice<SyncOptions::Adopt> kAdopts[] = {{"keep", SyncOptions::Adopt::kKeep},
                                                  {"lerp", SyncOptions::Adopt::kLerp}};

}  // namespace

bool AbslParseFlag(absl::string_view text, Device* v, std::string* error) {
  return ParseChoice(text, kDevices, v, error);
}
std::string AbslUnparseFlag(Device v) { return UnparseChoice(v, kDevices); }
bool AbslParseFlag(absl::string_view text, SyncOptions::Adopt* v, std::string* error) {
  return ParseChoice(text, kAdopts, v, error);
}
std::string AbslUnparseFlag(SyncOptions::Adopt v) { return UnparseChoice(v, kAdopts); }

}  // namespace diloco::worker

using diloco::worker::Device;
using diloco::worker::SyncOptions;

ABSL_FLAG(std::string, servers, "",
          "comma-separated shard endpoints, shard i at position i (empty: train without sync)");
ABSL_FLAG(uint32_t, worker_id, 0, "this worker's id (unique in the fleet)");
ABSL_FLAG(uint64_t, generation, 0, "worker generation (0: from the clock, new on each start)");
ABSL_FLAG(std::string, codec, "int8:256",
          "push codec: fp32, bf16, fp8, int8, int4 [:block], topk:<fraction>[:block] (sparse, "
          "kernels/topk.h), or auto: one of --auto_codecs, chosen from the measured link "
          "(worker/link_plan.h)");
ABSL_FLAG(std::string, auto_codecs, "int8:256,int4:256",
          "--codec=auto: the codecs to choose from, finest first");
ABSL_FLAG(std::string, inner_steps, "50",
          "H: inner steps between pushes of a fragment, or auto: from --inner_steps_min to "
          "--inner_steps_max, chosen from the measured link and step time");
ABSL_FLAG(uint32_t, inner_steps_min, 50, "--inner_steps=auto: the smallest H");
ABSL_FLAG(uint32_t, inner_steps_max, 2000, "--inner_steps=auto: the largest H");
ABSL_FLAG(double, link_margin, 1.5,
          "--codec=auto, --inner_steps=auto: a round's pushes and updates must cross the link "
          "in at most 1 / margin of the round's step time");
ABSL_FLAG(bool, dylu, false, "Dynamic Local Updates: scale H by this worker's relative speed");
ABSL_FLAG(bool, stream, true, "stagger fragments' pushes across the H steps");
ABSL_FLAG(SyncOptions::Adopt, adopt, SyncOptions::Adopt::kKeep,
          "adoption of new global values: keep (local = global + the steps taken since the "
          "push) or lerp (local = global + adopt_alpha*(local - global); alpha 0 replaces)");
ABSL_FLAG(double, adopt_alpha, 0.0, "--adopt=lerp: local = global + alpha*(local - global)");
ABSL_FLAG(uint32_t, carry_max, 8,
          "the most local steps a fragment carries into a push, in units of --inner_steps: a "
          "fragment whose push was answered so late that more steps piled up re-anchors on the "
          "last global values (its local work since is dropped)");
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
ABSL_FLAG(int64_t, start_step, 0,
          "the step this run starts at, of --steps: a restarted learner resumes its learning-rate "
          "schedule there and trains the rest; its batches are drawn afresh (the seed mixed with "
          "this step), not the ones it trained before");
ABSL_FLAG(std::string, state_dir, "",
          "a directory where the learner records the step of its last applied push and where "
          "its data stream stood then (worker-<id>.step), and its optimizer's moments "
          "(worker-<id>.adamw, every --state_every steps); a restart resumes its schedule, data "
          "and optimizer there (--start_step, when given, wins and resumes the schedule only). "
          "Empty: nothing recorded");
ABSL_FLAG(int64_t, state_every, 100,
          "with --state_dir: write the optimizer's moments (8 bytes per parameter) every N inner "
          "steps and at a clean stop (0: only at a clean stop)");
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
ABSL_FLAG(double, adam_beta1, 0.9, "AdamW beta1 (first-moment decay)");
ABSL_FLAG(double, adam_beta2, 0.95, "AdamW beta2 (second-moment decay)");
ABSL_FLAG(double, adam_eps, 1e-8, "AdamW epsilon");
ABSL_FLAG(double, grad_clip, 1.0, "clip the global gradient norm to this (0: off)");
ABSL_FLAG(uint64_t, seed, 1234, "seed of the batch order (and of theta(0) unless --init_seed)");
ABSL_FLAG(uint64_t, init_seed, 0,
          "seed of theta(0) (0: --seed). Workers of one fleet that train with different --seed "
          "and one --init_seed start from the same theta(0), whichever Init reaches a shard first");
ABSL_FLAG(std::string, init_from, "",
          "start from this model: a .safetensors file or a Hugging Face folder (config.json "
          "beside model.safetensors or a sharded index) holding --model's tensors under their "
          "own names (the built-in GPT also in Hugging Face's GPT-2 layout); any float dtype, "
          "widened to fp32. Uploaded as theta(0) where the fleet has none; a fleet that already "
          "has theta(0) keeps it, and a warning says so");
ABSL_FLAG(std::string, data, "synthetic",
          "synthetic, bin:PATH (llm.c token file) or text:PATH (bytes)");
ABSL_FLAG(int, num_workers, 0, "workers sharing the data (0: the number of --worker_id + 1)");
ABSL_FLAG(int, threads, 1, "CPU threads for the model's matrix products and attention");
ABSL_FLAG(Device, device, Device::kCpu,
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
ABSL_FLAG(double, link_floor_mbit, 1.0,
          "the data link's rate assumed until one is measured, in Mbit/s: a join or push is asked "
          "for again only after the bytes ahead of its answer could have crossed at the link's "
          "rate (set it to your slowest link's rate if it is below this)");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(10),
          "on a clean stop, wait for in-flight pushes to be answered until this long passes with "
          "no answer");
ABSL_FLAG(std::string, curve_server_key, "",
          "CURVE: the shards' public key (Z85 text or a file holding it); empty: no encryption");
ABSL_FLAG(std::string, curve_secret_key_file, "",
          "CURVE: this worker's secret key file (diloco-keygen); its public key must be listed "
          "for --worker_id in the shards' --curve_authorized_keys");

namespace diloco::worker {
namespace {

absl::StatusOr<data::DataOptions> ParseData(const std::string& spec, int index, int n) {
  data::DataOptions d;
  d.worker_index = index;
  d.num_workers = n;
  if (spec == "synthetic") return d;
  std::vector<std::string> kv = absl::StrSplit(spec, absl::MaxSplits(':', 1));
  if (kv.size() == 2 && kv[0] == "bin") {
    d.kind = data::DataKind::kTokenFile;
    d.path = kv[1];
    return d;
  }
  if (kv.size() == 2 && kv[0] == "text") {
    d.kind = data::DataKind::kTextFile;
    d.path = kv[1];
    return d;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--data=", spec, ": expected synthetic, bin:PATH or text:PATH"));
}

// --codec and --inner_steps: fixed, or auto with what the choice ranges over.
absl::Status CadenceFromFlags(WorkerOptions& w) {
  const std::string codec = absl::GetFlag(FLAGS_codec), list = absl::GetFlag(FLAGS_auto_codecs),
                    h = absl::GetFlag(FLAGS_inner_steps);
  CadenceText t{codec,
                list,
                h,
                absl::GetFlag(FLAGS_inner_steps_min),
                absl::GetFlag(FLAGS_inner_steps_max),
                "--codec",
                "--inner_steps"};
  if (auto st = ParseCadence(t, w.cadence); !st.ok()) return st;
  w.codec = w.cadence.codec;
  w.inner_steps = w.cadence.inner_steps;
  return absl::OkStatus();
}

// The sync client's options for the shards of --servers (not empty).
absl::StatusOr<SyncOptions> SyncOptionsFromFlags(std::vector<std::string> servers,
                                                 const WorkerOptions& w, uint32_t fragments) {
  SyncOptions so;
  so.servers = std::move(servers);
  so.worker_id = w.worker_id;
  so.generation = absl::GetFlag(FLAGS_generation);
  so.num_fragments = fragments;
  so.codec = w.codec;
  so.inner_steps = w.inner_steps;
  so.auto_codec = w.cadence.auto_codec;
  so.auto_codecs = w.cadence.auto_codecs;
  so.auto_inner_steps = w.cadence.auto_inner_steps;
  so.inner_steps_max = w.cadence.inner_steps_max;
  so.link_margin = absl::GetFlag(FLAGS_link_margin);
  if (!(so.link_margin >= 1))
    return absl::InvalidArgumentError(
        absl::StrCat("--link_margin=", so.link_margin, ": expected a factor >= 1"));
  so.dylu = absl::GetFlag(FLAGS_dylu);
  so.stream = absl::GetFlag(FLAGS_stream);
  so.adopt = absl::GetFlag(FLAGS_adopt);
  so.adopt_alpha = static_cast<float>(absl::GetFlag(FLAGS_adopt_alpha));
  if (so.adopt == SyncOptions::Adopt::kKeep && so.adopt_alpha != 0.0f)
    return absl::InvalidArgumentError("--adopt_alpha applies to --adopt=lerp only");
  so.carry_max = absl::GetFlag(FLAGS_carry_max);
  if (so.carry_max == 0) return absl::InvalidArgumentError("--carry_max must be at least 1");
  so.lockstep = absl::GetFlag(FLAGS_lockstep);
  so.error_feedback = absl::GetFlag(FLAGS_error_feedback);
  so.heartbeat = absl::GetFlag(FLAGS_heartbeat);
  so.shard_timeout = absl::GetFlag(FLAGS_shard_timeout);
  so.control_channel = absl::GetFlag(FLAGS_control_channel);
  so.link_rate_floor = absl::GetFlag(FLAGS_link_floor_mbit) * 1e6 / 8;
  if (!(so.link_rate_floor > 0))
    return absl::InvalidArgumentError("--link_floor_mbit must be a positive rate");
  if (so.heartbeat <= absl::ZeroDuration() || so.shard_timeout <= so.heartbeat)
    return absl::InvalidArgumentError(
        "--heartbeat must be positive and shorter than --shard_timeout");
  // CURVE: both keys or neither.
  auto keys = wire::CurveClientKeysFrom(absl::GetFlag(FLAGS_curve_server_key),
                                        absl::GetFlag(FLAGS_curve_secret_key_file));
  if (!keys.ok()) return keys.status();
  if (keys->has_value()) {
    so.curve_server_key = (*keys)->server_public_key;
    so.curve_public_key = (*keys)->public_key;
    so.curve_secret_key = (*keys)->secret_key;
  }
  return so;
}

// The trainer's options and the learning-rate schedule, into `w` (its model already set).
absl::Status TrainerOptionsFromFlags(WorkerOptions& w) {
  model::TrainerOptions& to = w.trainer;
  const int nw = absl::GetFlag(FLAGS_num_workers) > 0 ? absl::GetFlag(FLAGS_num_workers)
                                                      : static_cast<int>(w.worker_id) + 1;
  auto data = ParseData(absl::GetFlag(FLAGS_data), static_cast<int>(w.worker_id) % nw, nw);
  if (!data.ok()) return data.status();
  to.data = *data;
  to.batch_size = absl::GetFlag(FLAGS_batch);
  to.seq_len = absl::GetFlag(FLAGS_seq_len);
  to.adamw.lr = static_cast<float>(absl::GetFlag(FLAGS_lr));
  to.adamw.weight_decay = static_cast<float>(absl::GetFlag(FLAGS_weight_decay));
  to.adamw.beta1 = static_cast<float>(absl::GetFlag(FLAGS_adam_beta1));
  to.adamw.beta2 = static_cast<float>(absl::GetFlag(FLAGS_adam_beta2));
  to.adamw.eps = static_cast<float>(absl::GetFlag(FLAGS_adam_eps));
  if (!(to.adamw.beta1 >= 0 && to.adamw.beta1 < 1 && to.adamw.beta2 >= 0 && to.adamw.beta2 < 1))
    return absl::InvalidArgumentError("--adam_beta1 and --adam_beta2 must be in [0, 1)");
  if (!(to.adamw.eps > 0)) return absl::InvalidArgumentError("--adam_eps must be > 0");
  to.grad_clip = static_cast<float>(absl::GetFlag(FLAGS_grad_clip));
  if (!(to.grad_clip >= 0 && std::isfinite(to.grad_clip)))
    return absl::InvalidArgumentError("--grad_clip must be >= 0 (0: off)");
  auto lr_schedule = model::MakeLrSchedule(absl::GetFlag(FLAGS_lr_schedule), to.adamw.lr,
                                           absl::GetFlag(FLAGS_warmup_steps),
                                           static_cast<float>(absl::GetFlag(FLAGS_min_lr_fraction)),
                                           w.steps, w.duration, absl::GetFlag(FLAGS_lr_cooldown));
  if (!lr_schedule.ok()) return lr_schedule.status();
  w.lr_schedule = *lr_schedule;
  to.seed = absl::GetFlag(FLAGS_seed);
  to.init_seed = absl::GetFlag(FLAGS_init_seed) != 0 ? absl::GetFlag(FLAGS_init_seed) : to.seed;
  // A restarted learner (--start_step) draws another stream than the one it trained on; theta(0)
  // stays the seed's (it is the fleet's anyway once joined).
  if (w.start_step > 0) to.seed += static_cast<uint64_t>(w.start_step) * 0x9E3779B97F4A7C15ull;
  to.eval_batches = absl::GetFlag(FLAGS_eval_batches);
  to.threads = absl::GetFlag(FLAGS_threads);
  to.gpus = absl::GetFlag(FLAGS_gpus);
  return absl::OkStatus();
}

}  // namespace

void ParseWorkerFlags(int argc, char** argv) {
  absl::SetProgramUsageMessage("diloco-worker --servers=tcp://h:p,... --worker_id=N [flags]");
  ParseFlags(argc, argv, "", {"worker/worker_flags.cc"});
}

absl::StatusOr<WorkerOptions> WorkerOptionsFromFlags() {
  WorkerOptions w;
  const std::vector<std::string> servers =
      absl::StrSplit(absl::GetFlag(FLAGS_servers), ',', absl::SkipEmpty());
  auto plan = servers.empty() ? PlanFromFlags()
                              : PlanFromFlags(static_cast<uint32_t>(servers.size()), "--servers");
  if (!plan.ok()) return plan.status();
  w.model_spec = plan->model_spec;
  w.manifest = plan->manifest;
  w.gpt_model = plan->gpt.has_value();
  if (plan->gpt) w.trainer.model = *plan->gpt;
  if (auto st = CadenceFromFlags(w); !st.ok()) return st;
  w.step_slowdown = absl::GetFlag(FLAGS_step_slowdown);
  if (!(w.step_slowdown >= 1 && std::isfinite(w.step_slowdown)))
    return absl::InvalidArgumentError(
        absl::StrCat("--step_slowdown=", w.step_slowdown, ": expected a finite factor >= 1"));
  w.worker_id = absl::GetFlag(FLAGS_worker_id);
  w.device = absl::GetFlag(FLAGS_device);
  if (!w.gpt_model && w.device != Device::kSynthetic)
    return absl::InvalidArgumentError(absl::StrCat(
        "--model=", w.model_spec, ": --device=", AbslUnparseFlag(w.device),
        " trains the built-in GPT only (a preset such as tiny or small, or a spec "
        "L=..,H=..,C=..,T=..,V=..) and cannot train a model declared by its tensors; run it "
        "with --device=synthetic (no model math) or train it in PyTorch (docs/pytorch.md)"));
  w.eval_every = absl::GetFlag(FLAGS_eval_every);
  if (!w.evaluates() && w.eval_every > 0)
    return absl::InvalidArgumentError(
        "--eval_every needs a model to evaluate: --device=synthetic has none (use 0)");
  w.steps = absl::GetFlag(FLAGS_steps);
  w.start_step = absl::GetFlag(FLAGS_start_step);
  if (w.start_step < 0 || (w.start_step > 0 && w.start_step >= w.steps))
    return absl::InvalidArgumentError(absl::StrCat(
        "--start_step=", w.start_step, ": expected a step in [0, --steps) (--steps=", w.steps,
        "): a restarted learner resumes a schedule of --steps steps where it stopped"));
  w.state_dir = absl::GetFlag(FLAGS_state_dir);
  w.state_every = absl::GetFlag(FLAGS_state_every);
  if (w.state_every < 0)
    return absl::InvalidArgumentError(
        absl::StrCat("--state_every=", w.state_every, ": expected >= 0 (0: at a clean stop)"));
  if (!w.state_dir.empty() && w.start_step == 0) {
    auto resumed = ReadResumePoint(w.state_dir, w.worker_id);
    if (!resumed.ok()) return resumed.status();
    if (*resumed && w.steps > 0 && (*resumed)->step >= w.steps)
      return absl::FailedPreconditionError(absl::StrCat(
          "--state_dir: ", ResumeStatePath(w.state_dir, w.worker_id), " says worker ", w.worker_id,
          " already trained ", (*resumed)->step, " of --steps=", w.steps, " steps"));
    if (*resumed) {
      w.start_step = (*resumed)->step;
      w.resumed_elapsed = (*resumed)->elapsed;
      w.resumed_data_position = (*resumed)->data_position;
    }
  }
  w.duration = absl::GetFlag(FLAGS_duration);
  if (w.resumed_elapsed > absl::ZeroDuration() && w.resumed_elapsed >= w.duration)
    return absl::FailedPreconditionError(
        absl::StrCat("--state_dir: ", ResumeStatePath(w.state_dir, w.worker_id), " says worker ",
                     w.worker_id, " already trained ", absl::FormatDuration(w.resumed_elapsed),
                     " of --duration=", absl::FormatDuration(w.duration)));
  if (auto st = TrainerOptionsFromFlags(w); !st.ok()) return st;
  w.synthetic_step_time = absl::GetFlag(FLAGS_synthetic_step_time);
  w.step_delay = absl::GetFlag(FLAGS_step_delay);
  w.progress_interval = absl::GetFlag(FLAGS_progress_interval);
  w.metrics_jsonl = absl::GetFlag(FLAGS_metrics_jsonl);
  w.init_from = absl::GetFlag(FLAGS_init_from);
  w.save_model = absl::GetFlag(FLAGS_save_model);
  if (!w.save_model.empty())  // before, not after, a run
    if (auto st = model::CheckWritable(w.save_model); !st.ok()) return st;
  w.join_timeout = absl::GetFlag(FLAGS_join_timeout);
  w.drain_timeout = absl::GetFlag(FLAGS_drain_timeout);
  w.train_unjoined = absl::GetFlag(FLAGS_train_unjoined);
  w.log_sync_events = absl::GetFlag(FLAGS_log_sync_events);
  if (!servers.empty()) {
    auto so = SyncOptionsFromFlags(servers, w, plan->num_fragments);
    if (!so.ok()) return so.status();
    w.sync = *std::move(so);
  }
  return w;
}

}  // namespace diloco::worker
