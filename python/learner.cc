// _diloco_ps: the worker's sync client (worker/sync_client.h) for a PyTorch training loop.
//
// The Python side (diloco_ps/__init__.py) lays the model's parameters out in one flat fp32 CPU
// buffer, in named_parameters() order, and makes every parameter a view of it; this module
// holds that buffer (a NumPy view of the same memory, kept alive here) and hands it to the
// SyncClient, which reads deltas from it and adopts the shards' values into it in place,
// between steps, on the caller's thread: no copy of the model is made per step. The manifest is
// the parameters' names and shapes, so the plan and the model fingerprint follow the same
// rules as the C++ worker's, and a PyTorch learner whose parameters carry GptManifest's names
// and shapes joins the same fleet as C++ workers. Calls that wait (join, after_step in
// lockstep, drain) release the GIL; failures raise with the shard's reason.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/checksum.h"
#include "common/manifest.h"
#include "common/model_refusal.h"
#include "kernels/codec.h"
#include "worker/sync_client.h"

namespace py = pybind11;

namespace diloco::python {
namespace {

// A failed status as a Python exception: TimeoutError for a deadline, ValueError for a bad
// argument, RuntimeError otherwise; the message is the status's (the shard's reason when a
// shard refused).
[[noreturn]] void Raise(const absl::Status& s) {
  const std::string msg(s.message());
  if (absl::IsDeadlineExceeded(s)) {
    PyErr_SetString(PyExc_TimeoutError, msg.c_str());
    throw py::error_already_set();
  }
  if (absl::IsInvalidArgument(s)) throw py::value_error(msg);
  throw std::runtime_error(absl::StrCat(absl::StatusCodeToString(s.code()), ": ", msg));
}

// 48 bits of the values' XXH3-64, as diloco-worker logs params_checksum.
uint64_t ParamsChecksum(std::span<const float> values) {
  return Checksum64(values.data(), values.size_bytes()) & ((uint64_t{1} << 48) - 1);
}

worker::SyncOptions::Adopt ParseAdopt(const std::string& adopt) {
  if (adopt == "keep") return worker::SyncOptions::Adopt::kKeep;
  if (adopt == "lerp") return worker::SyncOptions::Adopt::kLerp;
  throw py::value_error("adopt=" + adopt + ": expected keep or lerp");
}

class Learner {
 public:
  Learner(std::vector<std::string> servers, uint32_t worker_id, std::vector<std::string> names,
          std::vector<std::vector<int64_t>> shapes, py::array_t<float, py::array::c_style> flat,
          const std::string& codec, uint32_t inner_steps, uint32_t fragments, uint64_t generation,
          bool dylu, bool stream, const std::string& adopt, double adopt_alpha, bool lockstep,
          bool error_feedback)
      : flat_(std::move(flat)) {
    if (names.size() != shapes.size()) throw py::value_error("one shape per parameter name");
    std::vector<TensorSpec> tensors;
    for (size_t i = 0; i < names.size(); ++i) tensors.push_back({names[i], shapes[i]});
    absl::StatusOr<Manifest> manifest = Manifest::Create(std::move(tensors));
    if (!manifest.ok()) Raise(manifest.status());
    if (flat_.ndim() != 1 || static_cast<uint64_t>(flat_.size()) != manifest->total_elements())
      throw py::value_error(absl::StrCat("the flat buffer holds ", flat_.size(),
                                         " values, the parameters ", manifest->total_elements()));
    params_ = std::span<float>(flat_.mutable_data(), static_cast<size_t>(flat_.size()));
    absl::StatusOr<kernels::Codec> c = kernels::ParseCodec(codec);
    if (!c.ok()) Raise(c.status());
    worker::SyncOptions o;
    o.servers = std::move(servers);
    o.worker_id = worker_id;
    o.generation = generation;
    o.num_fragments = fragments;
    o.codec = *c;
    o.inner_steps = inner_steps;
    o.dylu = dylu;
    o.stream = stream;
    o.adopt = ParseAdopt(adopt);
    o.adopt_alpha = static_cast<float>(adopt_alpha);
    if (o.adopt == worker::SyncOptions::Adopt::kKeep && o.adopt_alpha != 0.0f)
      throw py::value_error("adopt_alpha applies to adopt='lerp' only");
    o.lockstep = lockstep;
    o.error_feedback = error_feedback;
    absl::StatusOr<std::unique_ptr<worker::SyncClient>> client =
        worker::SyncClient::Create(o, *manifest);
    if (!client.ok()) Raise(client.status());
    client_ = std::move(*client);
    manifest_ = *std::move(manifest);
  }

  void Join(double timeout_s) {
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = client_->Join(params_, absl::Seconds(timeout_s));
    }
    if (!s.ok()) {  // a refused model: name the first differing tensor where this can
      const std::string why = ExplainModelRefusal(s.message(), manifest_, "<your model>");
      Raise(why.empty() ? s : absl::Status(s.code(), absl::StrCat(s.message(), "; ", why)));
    }
    last_step_ = absl::Now();
  }

  // Once per inner step, after optimizer.step(): the step time is the time since the last call.
  void AfterStep(uint64_t tokens) {
    const absl::Time now = absl::Now();
    const absl::Duration step =
        last_step_ == absl::InfinitePast() ? absl::ZeroDuration() : now - last_step_;
    {
      py::gil_scoped_release release;
      client_->AfterStep(params_, tokens, step);
    }
    last_step_ = absl::Now();
  }

  void Drain(double timeout_s) {
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = client_->Drain(params_, absl::Seconds(timeout_s));
    }
    if (!s.ok()) Raise(s);
  }

  py::dict Stats() const {
    const worker::SyncStats st = client_->stats();
    py::dict d;
    d["pushes"] = st.pushes;
    d["applied"] = st.applied;
    d["resends"] = st.resends;
    d["adoptions"] = st.adoptions;
    d["stale"] = st.stale;
    d["duplicates"] = st.duplicates;
    d["refused"] = st.refused;
    d["errors"] = st.errors;
    d["bytes_sent"] = st.bytes_sent;
    d["bytes_received"] = st.bytes_received;
    d["reconnects"] = st.reconnects;
    d["shard_restarts"] = st.shard_restarts;
    d["reanchors"] = st.reanchors;
    d["reanchored_steps"] = st.reanchored_steps;
    d["joined"] = st.joined;
    d["unacked"] = st.unacked;
    d["mean_staleness"] = st.mean_staleness;
    d["max_staleness"] = st.max_staleness;
    d["inner_steps"] = st.inner_steps_now;
    d["step_time_us"] = st.step_time_us;
    d["fleet_step_time_us"] = st.fleet_step_time_us;
    d["after_step_us"] = st.after_step_us;
    d["versions"] = st.versions;
    return d;
  }

  // The last refusals and other sync events, as (kind, fragment, detail) tuples.
  std::vector<std::tuple<std::string, uint32_t, std::string>> TakeEvents() {
    std::vector<std::tuple<std::string, uint32_t, std::string>> out;
    for (const worker::SyncEvent& e : client_->TakeEvents())
      out.emplace_back(worker::SyncEventName(e.kind), e.fragment, e.detail);
    return out;
  }

  uint64_t checksum() const { return ParamsChecksum(params_); }

  bool joined() const { return client_->joined(); }
  uint64_t plan_fingerprint() const { return client_->plan_fingerprint(); }

 private:
  py::array_t<float, py::array::c_style> flat_;  // keeps the model's memory alive
  std::span<float> params_;
  Manifest manifest_;  // this learner's, to name what differs from a shard's that refuses it
  std::unique_ptr<worker::SyncClient> client_;
  absl::Time last_step_ = absl::InfinitePast();
};

}  // namespace
}  // namespace diloco::python

PYBIND11_MODULE(_diloco_ps, m) {
  using diloco::python::Learner;
  m.doc() = "The DiLoCo parameter server's sync client (see the diloco_ps package).";
  m.def(
      "checksum",
      [](py::array_t<float, py::array::c_style> values) {
        return diloco::python::ParamsChecksum(
            std::span<const float>(values.data(), static_cast<size_t>(values.size())));
      },
      py::arg("values"));
  py::class_<Learner>(m, "Learner")
      .def(py::init<std::vector<std::string>, uint32_t, std::vector<std::string>,
                    std::vector<std::vector<int64_t>>, py::array_t<float, py::array::c_style>,
                    const std::string&, uint32_t, uint32_t, uint64_t, bool, bool,
                    const std::string&, double, bool, bool>(),
           py::arg("servers"), py::arg("worker_id"), py::arg("names"), py::arg("shapes"),
           py::arg("flat"), py::arg("codec"), py::arg("inner_steps"), py::arg("fragments"),
           py::arg("generation"), py::arg("dylu"), py::arg("stream"), py::arg("adopt"),
           py::arg("adopt_alpha"), py::arg("lockstep"), py::arg("error_feedback"))
      .def("join", &Learner::Join, py::arg("timeout_s"))
      .def("after_step", &Learner::AfterStep, py::arg("tokens"))
      .def("drain", &Learner::Drain, py::arg("timeout_s"))
      .def("stats", &Learner::Stats)
      .def("take_events", &Learner::TakeEvents)
      .def("checksum", &Learner::checksum)
      .def_property_readonly("joined", &Learner::joined)
      .def_property_readonly("plan_fingerprint", &Learner::plan_fingerprint);
}
