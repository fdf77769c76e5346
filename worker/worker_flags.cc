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
#include "worker/flags/flags.h"
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
  so.dylu = absl::GetFlag(FLAGS_dylu);
  so.stream = absl::GetFlag(FLAGS_stream);
  so.adopt = absl::GetFlag(FLAGS_adopt);
  so.adopt_alpha = static_cast<float>(absl::GetFlag(FLAGS_adopt_alpha));
  so.extrapolate = static_cast<float>(absl::GetFlag(FLAGS_extrapolate));
  so.align_pushes = absl::GetFlag(FLAGS_align_pushes);
  so.lockstep_overlap = absl::GetFlag(FLAGS_lockstep_overlap);
  so.carry_max = absl::GetFlag(FLAGS_carry_max);
  so.lockstep = absl::GetFlag(FLAGS_lockstep);
  so.error_feedback = absl::GetFlag(FLAGS_error_feedback);
  so.ef_decay = static_cast<float>(absl::GetFlag(FLAGS_ef_decay));
  so.heartbeat = absl::GetFlag(FLAGS_heartbeat);
  so.shard_timeout = absl::GetFlag(FLAGS_shard_timeout);
  so.control_channel = absl::GetFlag(FLAGS_control_channel);
  so.link_rate_floor = absl::GetFlag(FLAGS_link_floor_mbit) * 1e6 / 8;
  // CURVE: both keys or neither.
  auto keys = wire::CurveClientKeysFrom(absl::GetFlag(FLAGS_curve_server_key),
                                        absl::GetFlag(FLAGS_curve_secret_key_file));
  if (!keys.ok()) return keys.status();
  if (keys->has_value()) {
    so.curve_server_key = (*keys)->server_public_key;
    so.curve_public_key = (*keys)->public_key;
    so.curve_secret_key = (*keys)->secret_key;
  }
  if (auto st = Validate(so); !st.ok()) return st;
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
  absl::SetProgramUsageMessage(
      "diloco-worker --servers=tcp://h:p,... --worker_id=N [flags]\n\n"
      "One learner of a DiLoCo fleet. Its flags, by group (the file that defines them):\n"
      "  common/plan_flags.cc          the plan: --model, --fragments, --shards\n"
      "  worker/flags/data.cc          training data, its order, held-out evaluation\n"
      "  worker/flags/link.cc          connections to the shards: heartbeats, link rate\n"
      "  worker/flags/model.cc         device, theta(0), AdamW, learning-rate schedule, length\n"
      "  worker/flags/observability.cc progress lines and JSON-lines events\n"
      "  worker/flags/security.cc      CURVE keys\n"
      "  worker/flags/state.cc         --state_dir: continuing after a stop\n"
      "  worker/flags/sync.cc          the fleet, its id, codec, H, adoption, join and drain\n"
      "  worker/flags/test_only.cc     [test only] a slower machine; never in production\n"
      "  worker/island/island_flags.cc the ranks of a multi-process learner (an island)");
  ParseFlags(argc, argv, "",
             {"worker/flags/sync.cc", "worker/flags/link.cc", "worker/flags/model.cc",
              "worker/flags/data.cc", "worker/flags/state.cc", "worker/flags/security.cc",
              "worker/flags/observability.cc", "worker/island/island_flags.cc",
              "worker/flags/test_only.cc"});
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
  // A family's preset or spec that the C++ trainer has: what it trains.
  if (model::FindTrainerFamily(plan->family) != nullptr) {
    absl::StatusOr<model::TrainerModel> m = model::ResolveTrainerModel(plan->family, plan->config);
    if (!m.ok()) return m.status();
    w.trainer.model = *std::move(m);
  }
  if (auto st = CadenceFromFlags(w); !st.ok()) return st;
  w.step_slowdown = absl::GetFlag(FLAGS_step_slowdown);
  if (!(w.step_slowdown >= 1 && std::isfinite(w.step_slowdown)))
    return absl::InvalidArgumentError(
        absl::StrCat("--step_slowdown=", w.step_slowdown, ": expected a finite factor >= 1"));
  w.worker_id = absl::GetFlag(FLAGS_worker_id);
  w.device = absl::GetFlag(FLAGS_device);
  if (!w.trains_family_model() && w.device != Device::kSynthetic)
    return absl::InvalidArgumentError(absl::StrCat(
        "--model=", w.model_spec, ": --device=", AbslUnparseFlag(w.device),
        " trains the C++ trainer's model families only (", model::TrainerFamilyNames(),
        ": a preset such as tiny, small or llama-tiny, or a family's spec) and cannot train a "
        "model declared by its tensors; run it with --device=synthetic (no model math) or train "
        "it in PyTorch (docs/pytorch.md)"));
  if (w.device == Device::kCuda && w.trainer.model.family != "gpt")
    return absl::InvalidArgumentError(
        absl::StrCat("--model=", w.model_spec, ": --device=cuda: the ", w.trainer.model.family,
                     " family has no CUDA kernels yet (the CUDA trainer runs the gpt family); "
                     "train it with --device=cpu (or in PyTorch, docs/pytorch.md)"));
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
