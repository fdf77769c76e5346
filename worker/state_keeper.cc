#include "worker/state_keeper.h"

#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "worker/optimizer_state.h"
#include "worker/resume_state.h"
#include "worker/worker_flags.h"

namespace diloco::worker {

StateKeeper::StateKeeper(const WorkerOptions& o, int rank)
    : dir_(o.state_dir),
      worker_id_(o.worker_id),
      every_(o.state_every),
      writes_(!o.state_dir.empty() && rank == 0),
      data_position_(o.resumed_data_position) {}

absl::StatusOr<std::string> StateKeeper::Restore(Trainer& trainer) {
  if (dir_.empty()) return std::string();
  std::error_code ec;
  if (writes_ && (std::filesystem::create_directories(dir_, ec), ec))
    return absl::FailedPreconditionError(
        absl::StrCat("--state_dir: cannot create ", dir_, ": ", ec.message()));
  std::string line;
  if (!data_position_.empty()) {
    if (absl::Status st = trainer.SetDataPosition(data_position_); !st.ok())
      return absl::DataLossError(
          absl::StrCat("--state_dir: ", ResumeStatePath(dir_, worker_id_), ": ", st.message()));
    line = "its data stream where it stood";
  }
  if (!trainer.optimizer_state()) {
    optimizer_kept_ = false;
    return absl::StrCat(line, line.empty() ? "" : "; ",
                        "no optimizer state kept (this trainer holds its moments on the device)");
  }
  absl::StatusOr<std::optional<int64_t>> from = RestoreOptimizerState(dir_, worker_id_, trainer);
  if (!from.ok()) return from.status();
  if (*from)
    absl::StrAppend(&line, line.empty() ? "" : ", ", "its optimizer's moments of step ", **from);
  return line;
}

absl::Status StateKeeper::AfterStep(const Trainer& trainer, int64_t step, uint64_t applied,
                                    absl::Duration elapsed) {
  if (!writes_) return absl::OkStatus();
  absl::Status result;
  if (applied > applied_recorded_) {
    applied_recorded_ = applied;
    result.Update(WriteResumePoint(dir_, worker_id_, {step, elapsed, trainer.DataPosition()}));
  }
  if (optimizer_kept_ && every_ > 0 && step % every_ == 0)
    result.Update(WriteOptimizerState(dir_, worker_id_, step, trainer));
  return result;
}

absl::Status StateKeeper::Finish(const Trainer& trainer, int64_t step) {
  if (!writes_ || !optimizer_kept_) return absl::OkStatus();
  return WriteOptimizerState(dir_, worker_id_, step, trainer);
}

}  // namespace diloco::worker
