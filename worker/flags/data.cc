// diloco-worker --help, group "data": The training data, its order and the held-out evaluation.
// Read by worker_flags.cc (declared in worker/flags/flags.h).
#include <string>

#include "absl/flags/flag.h"
#include "worker/flags/flags.h"

ABSL_FLAG(std::string, data, "synthetic",
          "synthetic, bin:PATH (llm.c token file) or text:PATH (bytes)");
ABSL_FLAG(int, num_workers, 0, "workers sharing the data (0: the number of --worker_id + 1)");
ABSL_FLAG(uint64_t, seed, 1234, "seed of the batch order (and of theta(0) unless --init_seed)");
ABSL_FLAG(int, eval_batches, 4, "held-out batches per evaluation");
ABSL_FLAG(int64_t, eval_every, 0,
          "every N inner steps, write an \"eval\" event with the held-out loss of the local model "
          "and of the last adopted global one (0: only at the end); an asynchronous worker "
          "that aligns its pushes evaluates at its first adoption of fragment 0 from the due "
          "step, with the rest of the fleet (worker/eval_schedule.h)");
