#include "python/learner_options.h"

#include <pybind11/stl.h>

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "python/raise.h"
#include "schema/curve.h"
#include "worker/cadence.h"

namespace py = pybind11;

namespace diloco::python {
namespace {

worker::SyncOptions::Adopt ParseAdopt(const std::string& adopt) {
  if (adopt == "keep") return worker::SyncOptions::Adopt::kKeep;
  if (adopt == "lerp") return worker::SyncOptions::Adopt::kLerp;
  throw py::value_error("adopt=" + adopt + ": expected keep or lerp");
}

// A keyword's value as text: str(value) for inner_steps (50 or "auto"), os.fspath(value) for a
// key or a key file (a str or a path), "" for None.
std::string TextOf(const py::object& v, bool path) {
  if (v.is_none()) return "";
  if (path) return py::str(py::module_::import("os").attr("fspath")(v));
  return py::str(v);
}

}  // namespace

LearnerOptions LearnerOptions::Make(LearnerOptions o) {
  worker::SyncOptions& s = o.sync;
  const worker::CadenceText cadence{o.codec, o.auto_codecs, o.inner_steps, o.inner_steps_min,
                                    o.inner_steps_max};
  if (auto st = worker::ParseCadence(cadence, s); !st.ok()) Raise(st);
  s.num_fragments = o.fragments;
  s.generation = o.generation;
  s.dylu = o.dylu;
  s.stream = o.stream;
  s.adopt = ParseAdopt(o.adopt);
  s.adopt_alpha = static_cast<float>(o.adopt_alpha);
  s.extrapolate = static_cast<float>(o.extrapolate);
  s.align_pushes = o.align_pushes;
  s.lockstep = o.lockstep;
  s.error_feedback = o.error_feedback;
  s.link_margin = o.link_margin;
  // CURVE: both keys or neither, read as diloco-worker reads its --curve_* flags.
  auto keys = wire::CurveClientKeysFrom(o.curve_server_key, o.curve_secret_key_file);
  if (!keys.ok()) Raise(keys.status());
  if (keys->has_value()) {
    s.curve_server_key = (*keys)->server_public_key;
    s.curve_public_key = (*keys)->public_key;
    s.curve_secret_key = (*keys)->secret_key;
  }
  if (auto st = worker::Validate(s, worker::OptionNames::kKeywords); !st.ok()) Raise(st);
  return o;
}

py::dict LearnerOptions::Keywords() const {
  py::dict d;
  d["codec"] = codec;
  d["inner_steps"] = InnerSteps();
  d["fragments"] = fragments;
  d["generation"] = generation;
  d["dylu"] = dylu;
  d["stream"] = stream;
  d["adopt"] = adopt;
  d["adopt_alpha"] = adopt_alpha;
  d["extrapolate"] = extrapolate;
  d["align_pushes"] = align_pushes;
  d["lockstep"] = lockstep;
  d["error_feedback"] = error_feedback;
  d["auto_codecs"] = auto_codecs;
  d["inner_steps_min"] = inner_steps_min;
  d["inner_steps_max"] = inner_steps_max;
  d["link_margin"] = link_margin;
  d["curve_server_key"] = PathOrNone(curve_server_key);
  d["curve_secret_key_file"] = PathOrNone(curve_secret_key_file);
  return d;
}

py::object LearnerOptions::InnerSteps() const {
  if (sync.auto_inner_steps) return py::str(inner_steps);
  return py::int_(sync.inner_steps);
}

py::object LearnerOptions::PathOrNone(const std::string& s) {
  return s.empty() ? py::object(py::none()) : py::object(py::str(s));
}

void BindLearnerOptions(py::module_& m) {
  const LearnerOptions d;  // the defaults
  py::class_<LearnerOptions>(m, "LearnerOptions",
                             "The learner's options, keywords only (diloco_ps.Learner lists them); "
                             "a bad value raises ValueError naming its keyword.")
      .def(
          py::init([](std::string codec, const py::object& inner_steps, uint32_t fragments,
                      uint64_t generation, bool dylu, bool stream, std::string adopt,
                      double adopt_alpha, double extrapolate, bool align_pushes, bool lockstep,
                      bool error_feedback, std::string auto_codecs, uint32_t inner_steps_min,
                      uint32_t inner_steps_max, double link_margin,
                      const py::object& curve_server_key, const py::object& curve_secret_key_file) {
            LearnerOptions o;
            o.codec = std::move(codec);
            o.inner_steps = TextOf(inner_steps, false);
            o.fragments = fragments;
            o.generation = generation;
            o.dylu = dylu;
            o.stream = stream;
            o.adopt = std::move(adopt);
            o.adopt_alpha = adopt_alpha;
            o.extrapolate = extrapolate;
            o.align_pushes = align_pushes;
            o.lockstep = lockstep;
            o.error_feedback = error_feedback;
            o.auto_codecs = std::move(auto_codecs);
            o.inner_steps_min = inner_steps_min;
            o.inner_steps_max = inner_steps_max;
            o.link_margin = link_margin;
            o.curve_server_key = TextOf(curve_server_key, true);
            o.curve_secret_key_file = TextOf(curve_secret_key_file, true);
            return LearnerOptions::Make(std::move(o));
          }),
          py::kw_only(), py::arg("codec") = d.codec, py::arg("inner_steps") = d.InnerSteps(),
          py::arg("fragments") = d.fragments, py::arg("generation") = d.generation,
          py::arg("dylu") = d.dylu, py::arg("stream") = d.stream, py::arg("adopt") = d.adopt,
          py::arg("adopt_alpha") = d.adopt_alpha, py::arg("extrapolate") = d.extrapolate,
          py::arg("align_pushes") = d.align_pushes, py::arg("lockstep") = d.lockstep,
          py::arg("error_feedback") = d.error_feedback, py::arg("auto_codecs") = d.auto_codecs,
          py::arg("inner_steps_min") = d.inner_steps_min,
          py::arg("inner_steps_max") = d.inner_steps_max, py::arg("link_margin") = d.link_margin,
          py::arg("curve_server_key") = py::none(), py::arg("curve_secret_key_file") = py::none())
      .def("keywords", &LearnerOptions::Keywords)
      .def("__repr__",
           [](const LearnerOptions& o) {
             std::string out = "LearnerOptions(";
             bool first = true;
             for (const auto& [k, v] : o.Keywords()) {
               out += absl::StrCat(first ? "" : ", ", std::string(py::str(k)), "=",
                                   std::string(py::repr(v)));
               first = false;
             }
             return out + ")";
           })
      .def_readonly("codec", &LearnerOptions::codec)
      .def_property_readonly("inner_steps", &LearnerOptions::InnerSteps)
      .def_readonly("fragments", &LearnerOptions::fragments)
      .def_readonly("generation", &LearnerOptions::generation)
      .def_readonly("dylu", &LearnerOptions::dylu)
      .def_readonly("stream", &LearnerOptions::stream)
      .def_readonly("adopt", &LearnerOptions::adopt)
      .def_readonly("adopt_alpha", &LearnerOptions::adopt_alpha)
      .def_readonly("extrapolate", &LearnerOptions::extrapolate)
      .def_readonly("align_pushes", &LearnerOptions::align_pushes)
      .def_readonly("lockstep", &LearnerOptions::lockstep)
      .def_readonly("error_feedback", &LearnerOptions::error_feedback)
      .def_readonly("auto_codecs", &LearnerOptions::auto_codecs)
      .def_readonly("inner_steps_min", &LearnerOptions::inner_steps_min)
      .def_readonly("inner_steps_max", &LearnerOptions::inner_steps_max)
      .def_readonly("link_margin", &LearnerOptions::link_margin)
      .def_property_readonly(
          "curve_server_key",
          [](const LearnerOptions& o) { return LearnerOptions::PathOrNone(o.curve_server_key); })
      .def_property_readonly("curve_secret_key_file", [](const LearnerOptions& o) {
        return LearnerOptions::PathOrNone(o.curve_secret_key_file);
      });
}

}  // namespace diloco::python
