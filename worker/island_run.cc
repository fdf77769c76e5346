#include "worker/island_run.h"

#include <algorithm>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/log.h"
#include "worker/island/island_flags.h"
#include "worker/model/lr_schedule.h"
#if defined(DILOCO_MODEL_HAVE_CUDA)
#include "worker/model/cuda/cuda_trainer.h"
#include "worker/model/cuda/nccl_ranks.h"
#endif

namespace diloco::worker {
namespace {

// Every setting the ranks must share, "key=value" without spaces in values.
std::string IslandConfig(const WorkerOptions& w, const Trainer& trainer) {
  const model::TrainerOptions& t = w.trainer;
  std::string schedule = model::Describe(w.lr_schedule);
  std::replace(schedule.begin(), schedule.end(), ' ', '_');
  return absl::StrCat("manifest=", absl::Hex(trainer.manifest().fingerprint(), absl::kZeroPad16),
                      " model=", w.model_spec, " device=", AbslUnparseFlag(w.device),
                      " gpus=", t.gpus, " worker_id=", w.worker_id, " batch=", t.batch_size,
                      " seq_len=", t.seq_len, " seed=", t.seed, " init_seed=", t.init_seed,
                      " lr=", absl::StrFormat("%g", t.adamw.lr), " schedule=", schedule,
                      " grad_clip=", absl::StrFormat("%g", t.grad_clip), " steps=", w.steps,
                      " start_step=", w.start_step, " duration=", absl::FormatDuration(w.duration),
                      " data=", int(t.data.kind), ":", t.data.path, " inner_steps=", w.inner_steps);
}

// A CPU rank, or a CUDA rank on one GPU, the local rank's, made the current device (so that
// the trainer created next runs there); anything else refused naming why.
absl::Status PrepareDevice(const island::IslandSpec& s, const WorkerOptions& w) {
  const std::string me = absl::StrCat("island rank ", s.rank, " of ", s.size, " (", s.source, ")");
  if (w.device == Device::kCpu) return absl::OkStatus();
  if (w.device != Device::kCuda)
    return absl::UnimplementedError(
        absl::StrCat(me, ": --device=", AbslUnparseFlag(w.device),
                     " cannot train as an island's rank (cpu or cuda)"));
  if (w.trainer.gpus != 1)
    return absl::InvalidArgumentError(absl::StrCat(
        me, ": --device=cuda --gpus=", w.trainer.gpus,
        ": an island's GPU rank trains on one GPU (--gpus=1; the node's GPUs are its ranks, "
        "each on the GPU of its local rank)"));
#if defined(DILOCO_MODEL_HAVE_CUDA)
  std::string why;
  const int found = model::CudaDeviceCount(&why);
  if (s.local_rank >= found)
    return absl::FailedPreconditionError(
        absl::StrCat("rank ", s.rank, ": ",
                     s.local_rank_from.empty() ? "local rank (no LOCAL_RANK or SLURM_LOCALID) "
                                               : s.local_rank_from + "=",
                     s.local_rank, " but this node has ", found, found == 1 ? " GPU" : " GPUs",
                     why.empty() ? "" : absl::StrCat(" (CUDA: ", why, ")")));
  if (!model::cuda::NcclAvailable(&why))
    return absl::FailedPreconditionError(
        absl::StrCat(me, ": --device=cuda islands average gradients with NCCL: ", why));
  if (std::string e = model::cuda::SelectDevice(s.local_rank); !e.empty())
    return absl::UnavailableError(absl::StrCat(me, ": ", e));
  return absl::OkStatus();
#else
  return absl::FailedPreconditionError(absl::StrCat(
      me, ": --device=cuda: this build has no CUDA backend (configure with nvcc found)"));
#endif
}

// The CUDA trainer's gradients summed over the ranks with NCCL: rank 0's unique id (or why it
// has none) through the rendezvous store, then every rank's communicator on its GPU.
absl::Status JoinNccl(island::Island& is, Trainer& trainer) {
#if defined(DILOCO_MODEL_HAVE_CUDA)
  auto* cuda = dynamic_cast<model::CudaTrainer*>(&trainer);
  if (cuda == nullptr) return absl::InternalError("--device=cuda island without the CUDA trainer");
  std::string id;
  if (is.rank() == 0) {
    const std::string e = model::cuda::NcclUniqueId(&id);
    id = e.empty() ? "id:" + id : "error:" + e;
  }
  absl::StatusOr<std::string> shared = is.ShareFromRank0("nccl_unique_id", id);
  if (!shared.ok()) return shared.status();
  if (!shared->starts_with("id:"))
    return absl::UnavailableError(absl::StrCat("island: rank 0 has no NCCL unique id: ",
                                               shared->substr(shared->find(':') + 1)));
  std::unique_ptr<model::cuda::NcclRanks> ranks;
  if (std::string e = model::cuda::NcclRanks::Init(
          shared->substr(3), is.rank(), is.size(), is.spec().local_rank,
          absl::ToDoubleSeconds(is.spec().timeout), &ranks);
      !e.empty())
    return absl::UnavailableError(absl::StrCat("island: ", e));
  return cuda->UseRanks(std::move(ranks));
#else
  (void)is, (void)trainer;
  return absl::FailedPreconditionError("--device=cuda: this build has no CUDA backend");
#endif
}

}  // namespace

absl::StatusOr<island::IslandSpec> PrepareIsland(WorkerOptions& w) {
  absl::StatusOr<island::IslandSpec> spec = island::IslandSpecFromFlags();
  if (!spec.ok() || spec->alone()) return spec;
  if (absl::Status st = PrepareDevice(*spec, w); !st.ok()) return st;
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
  absl::Status set = w.device == Device::kCuda
                         ? JoinNccl(*is, trainer)
                         : trainer.SetGradientReducer([is](std::span<float> g, float& loss) {
                             if (absl::Status st = is->AllReduceMean(g); !st.ok()) return st;
                             return is->AllReduceMean(std::span<float>(&loss, 1));
                           });
  if (!set.ok()) return set;
  run.steps = std::make_unique<island::IslandSteps>(*run.island, trainer);
  Logf(LogLevel::kInfo,
       "diloco-worker[%u]: island rank %d of %d (%s), rendezvous %s:%d, gradients over %s",
       w.worker_id, spec.rank, spec.size, spec.source.c_str(), spec.master_host.c_str(),
       spec.master_port,
       w.device == Device::kCuda ? absl::StrCat("NCCL on GPU ", spec.local_rank).c_str() : "gloo");
  return run;
}

}  // namespace diloco::worker
