// _diloco_ps: the native half of the diloco_ps package (python/diloco_ps/ is the Python half):
// the learner's options, the learner, and the manifest helpers, each bound by its own file.
#include <pybind11/pybind11.h>

#include "python/learner.h"
#include "python/learner_options.h"
#include "python/manifests.h"

PYBIND11_MODULE(_diloco_ps, m) {
  m.doc() = "The DiLoCo parameter server's sync client (see the diloco_ps package).";
  diloco::python::BindManifests(m);
  diloco::python::BindLearnerOptions(m);
  diloco::python::BindLearner(m);
}
