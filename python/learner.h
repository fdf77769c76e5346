// diloco_ps._diloco_ps.Learner: the worker's sync client for a PyTorch training loop whose
// parameters stay where they are (learner.cc says how it copies them).
#pragma once

#include <pybind11/pybind11.h>

namespace diloco::python {

// Adds the native Learner to the module (after LearnerOptions, which its constructor takes).
void BindLearner(pybind11::module_& m);

}  // namespace diloco::python
