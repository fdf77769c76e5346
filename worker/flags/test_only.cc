// diloco-worker --help, group "test_only": [test only] Flags that make a learner behave like a
// slower machine, for tests and benchmarks; never needed in production. Read by worker_flags.cc
// (declared in worker/flags/flags.h).
#include "absl/flags/flag.h"
#include "absl/time/time.h"
#include "worker/flags/flags.h"

ABSL_FLAG(absl::Duration, step_delay, absl::ZeroDuration(),
          "[test only] extra time per inner step (a slower machine)");
ABSL_FLAG(double, step_slowdown, 1.0,
          "[test only] each inner step takes this many times its compute time (sleeps the rest): "
          "a device this many times slower, whatever the speed of this machine (>= 1)");
