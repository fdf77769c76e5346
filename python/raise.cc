#include "python/raise.h"

#include <pybind11/pybind11.h>

#include <stdexcept>
#include <string>

#include "absl/strings/str_cat.h"

namespace py = pybind11;

namespace diloco::python {

void Raise(const absl::Status& s) {
  const std::string msg(s.message());
  if (absl::IsDeadlineExceeded(s)) {
    PyErr_SetString(PyExc_TimeoutError, msg.c_str());
    throw py::error_already_set();
  }
  if (absl::IsInvalidArgument(s)) throw py::value_error(msg);
  throw std::runtime_error(absl::StrCat(absl::StatusCodeToString(s.code()), ": ", msg));
}

}  // namespace diloco::python
