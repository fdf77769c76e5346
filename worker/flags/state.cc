// diloco-worker --help, group "state": What a learner keeps on disk to continue after a stop
// (--state_dir) and the step a restarted learner resumes its schedule at. Read by worker_flags.cc
// (declared in worker/flags/flags.h).
#include <string>

#include "absl/flags/flag.h"
#include "worker/flags/flags.h"

ABSL_FLAG(std::string, state_dir, "",
          "a directory where the learner records the step of its last applied push and where "
          "its data stream stood then (worker-<id>.step), and its optimizer's moments "
          "(worker-<id>.adamw, every --state_every steps); a restart resumes its schedule, data "
          "and optimizer there (--start_step, when given, wins and resumes the schedule only). "
          "Empty: nothing recorded");
ABSL_FLAG(int64_t, state_every, 100,
          "with --state_dir: write the optimizer's moments (8 bytes per parameter) every N inner "
          "steps and at a clean stop (0: only at a clean stop)");
ABSL_FLAG(int64_t, start_step, 0,
          "the step this run starts at, of --steps: a restarted learner resumes its learning-rate "
          "schedule there and trains the rest; its batches are drawn afresh (the seed mixed with "
          "this step), not the ones it trained before");
