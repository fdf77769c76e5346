// A failed absl::Status as the Python exception the diloco_ps module raises for it, so that every
// binding maps the same codes the same way.
#pragma once

#include "absl/status/status.h"

namespace diloco::python {

// TimeoutError for a deadline, ValueError for a bad argument, RuntimeError otherwise; the message
// is the status's (the shard's reason when a shard refused).
[[noreturn]] void Raise(const absl::Status& s);

}  // namespace diloco::python
