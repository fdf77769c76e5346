// The push codec and H as text, read the same way by the worker's flags (worker/worker_flags.cc)
// and the Python learner (python/learner_options.cc): a codec ("int8:256") or "auto", one of
// `auto_codecs` (comma-separated, finest first) chosen from the link; and a number of inner
// steps or "auto", from `h_min` to `h_max` (worker/link_plan.h). `what_codec` and `what_h` name
// the two settings in errors ("--codec", "codec").
#pragma once

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "worker/sync_options.h"

namespace diloco::worker {

struct CadenceText {
  absl::string_view codec, auto_codecs, inner_steps;
  uint32_t h_min = 50, h_max = 2000;
  absl::string_view what_codec = "codec", what_h = "inner_steps";
};

// Sets codec, inner_steps and the auto fields of `so` (with auto, codec is the first it may
// choose and inner_steps the smallest H). An error names the setting and leaves `so` as it was.
absl::Status ParseCadence(const CadenceText& text, SyncOptions& so);

}  // namespace diloco::worker
