#include "worker/island_run.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "worker/island/island_flags.h"
#include "worker/model/lr_schedule.h"

namespace diloco::worker {
namespace {

// Every setting the ranks must share, "key=value" without spaces in values.
std::string IslandConfig(const WorkerOptions& w, const Trainer& trainer) {
  const model::TrainerOptions& t = w.trainer;
  std::string schedule = model::Describe(w.lr_schedule);
  std::replace(schedule.begin(), schedule.end(), ' ', '_');
  return absl::StrCat("manifest=", absl::Hex(trainer.manifest().fingerprint(), absl::kZeroPad16),
                      " model=", w.model_spec, " worker_id=", w.worker_id, " batch=", t.batch_size,
                      " seq_len=", t.seq_len, " seed=", t.seed, " init_seed=", t.init_seed,
                      " lr=", absl::StrFormat("%g", t.adamw.lr), " schedule=", schedule,
                      " grad_clip=", absl::StrFormat("%g", t.grad_clip), " steps=", w.steps,
                      " start_step=", w.start_step, " duration=", absl::FormatDuration(w.duration),
                      " data=", int(t.data.kind), ":", t.data.path, " inner_steps=", w.inner_steps);
}

}  // namespace

absl::StatusOr<island::IslandSpec> PrepareIsland(WorkerOptions& w) {
  absl::StatusOr<island::IslandSpec> spec = island::IslandSpecFromFlags();
  if (!spec.ok() || spec->alone()) return spec;
  if (w.device != Device::kCpu)
    return absl::UnimplementedError(absl::StrCat(
        "an island of ", spec->size, " ranks (", spec->source,
        ") trains on the CPU only: --device=", AbslUnparseFlag(w.device),
        " islands across processes are not built (one node's GPUs: --device=cuda --gpus=N)"));
  if (w.sync && !w.sync->curve_secret_key.empty())
    spec->keys = wire::CurveKeyPair{w.sync->curve_public_key, w.sync->curve_secret_key};
  w.trainer.data_slice = spec->rank;
  w.trainer.data_slices = spec->size;
  if (spec->rank != 0) {
    w.sync.reset();
    w.eval_every = 0;
    w.save_model.clear();
    if (!w.metrics_jsonl.empty()) w.metrics_jsonl += absl::StrCat(".rank", spec->rank);
  }
  return spec;
}

absl::StatusOr<IslandRun> JoinIsland(const island::IslandSpec& spec, const WorkerOptions& w,
                                     Trainer& trainer) {
  IslandRun run;
  if (spec.alone()) return run;
  auto joined = island::Island::Join(spec, IslandConfig(w, trainer));
  if (!joined.ok()) return joined.status();
  run.island = *std::move(joined);
  island::Island* is = run.island.get();
  absl::Status set = trainer.SetGradientReducer([is](std::span<float> g, float& loss) {
    if (absl::Status st = is->AllReduceMean(g); !st.ok()) return st;
    return is->AllReduceMean(std::span<float>(&loss, 1));
  });
  if (!set.ok()) return set;
  run.steps = std::make_unique<island::IslandSteps>(*run.island, trainer);
  Logf(LogLevel::kInfo, "diloco-worker[%u]: island rank %d of %d (%s), rendezvous %s:%d",
       w.worker_id, spec.rank, spec.size, spec.source.c_str(), spec.master_host.c_str(),
       spec.master_port);
  return run;
}

}  // namespace diloco::worker
