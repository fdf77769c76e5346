// diloco_ps.LearnerOptions: the learner's options as keywords with defaults (the defaults are
// this struct's; diloco_ps.Learner's docstring lists each option and its meaning), and the
// SyncOptions they make, checked once by worker::Validate under the keywords' names, the check
// diloco-worker's flags make: a bad value raises ValueError naming the keyword and the value.
// Made only by Make, so a LearnerOptions that exists is a valid one; its fields are read-only.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <string>

#include "worker/sync_client.h"

namespace diloco::python {

struct LearnerOptions {
  std::string codec = "int8:256";
  std::string inner_steps = "50";  // a number of steps, or auto
  uint32_t fragments = 4;
  uint64_t generation = 0;  // 0: from the clock when the learner starts
  bool dylu = false;
  bool stream = true;
  std::string adopt = "keep";
  double adopt_alpha = 0;
  double extrapolate = 1.25;
  bool align_pushes = true;
  bool lockstep = false;
  bool error_feedback = true;
  std::string auto_codecs = "int8:256,int4:256,topk:0.0429";
  uint32_t inner_steps_min = 50;
  uint32_t inner_steps_max = 2000;
  double link_margin = 1.5;
  std::string curve_server_key, curve_secret_key_file;  // "": none
  worker::SyncOptions sync;                             // all but the servers and the worker id

  // Reads and checks the keywords' values into `o`; raises ValueError naming the keyword.
  static LearnerOptions Make(LearnerOptions o);

  // The keywords that make these options again (LearnerOptions(**keywords())).
  pybind11::dict Keywords() const;

  // inner_steps as given: a number, or "auto".
  pybind11::object InnerSteps() const;
  static pybind11::object PathOrNone(const std::string& s);
};

// Adds diloco_ps.LearnerOptions to the module.
void BindLearnerOptions(pybind11::module_& m);

}  // namespace diloco::python
