// The native Learner (diloco_ps._diloco_ps.Learner): the worker's sync client
// (worker/sync_client.h) for a PyTorch training loop whose parameters stay where they are (CPU or
// CUDA; float32, bfloat16 or float16).
//
// The learner keeps one flat fp32 host buffer in manifest order (allocated by the Python side,
// pinned where the model is on CUDA) that the SyncClient reads deltas from and adopts global
// values into. The buffer is a mirror, not the model: a fragment's part of it is current only
// while the client works on that fragment. The client asks for the parameters range by range
// (SyncClient::AfterStep's ParamsFn), and only on a step that reads or writes them (a due push,
// an adoption, a theta(0) request); a range always lies in one fragment, and the client always
// works on a fragment as a whole, so the first range of a fragment asked for in a call makes the
// Python side copy that whole fragment down (`fetch(fragment)`: upcast to fp32, one call per
// fragment), and the fragments handed out are remembered. After the call, the fragments the
// client wrote (adoptions, re-anchors, a push's extrapolation; counted by the client, below) are
// copied back up (`store(fragments)`: rounded once to the parameter's dtype) and become
// last_written(); a fragment only read is not copied back. A step on which nothing is due calls
// neither.
// Join and drain read and write the whole model the same way.
//
// Which fragments were written: the client counts each write of a fragment's local values
// (SyncStats::local_writes: adoptions, re-anchors, the extrapolation at a push and its undoing);
// a handed-out fragment whose count moved was written. A push without extrapolation
// (extrapolate=1, or lockstep) only reads its fragment.
//
// Calls that wait (join, after_step in lockstep, drain) release the GIL and take it back only
// to copy; failures raise with the shard's reason.
#include "python/learner.h"

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/manifest.h"
#include "common/model_refusal.h"
#include "common/plan.h"
#include "kernels/codec.h"
#include "python/learner_options.h"
#include "python/manifests.h"
#include "python/raise.h"
#include "worker/sync_client.h"

namespace py = pybind11;

namespace diloco::python {
namespace {

// One piece of a fragment as a slice of one tensor: elements [start, stop) of the tensor's
// flattened values, at `flat` in the host buffer.
using Slice = std::tuple<uint32_t, uint64_t, uint64_t, uint64_t>;  // tensor, start, stop, flat

class Learner {
 public:
  Learner(std::vector<std::string> servers, uint32_t worker_id, std::vector<std::string> names,
          std::vector<std::vector<int64_t>> shapes, std::vector<std::string> dtypes,
          py::array_t<float, py::array::c_style> host, py::function fetch, py::function store,
          const LearnerOptions& options)
      : host_array_(std::move(host)), fetch_(std::move(fetch)), store_(std::move(store)) {
    std::vector<DeclaredTensor> decls;
    manifest_ = CheckedManifest(names, shapes, dtypes, "this learner's model", &decls);
    if (host_array_.ndim() != 1 ||
        static_cast<uint64_t>(host_array_.size()) != manifest_.total_elements())
      throw py::value_error(absl::StrCat("the host buffer holds ", host_array_.size(),
                                         " values, the parameters ", manifest_.total_elements()));
    host_ = std::span<float>(host_array_.mutable_data(), static_cast<size_t>(host_array_.size()));
    worker::SyncOptions o = options.sync;
    o.servers = std::move(servers);
    o.worker_id = worker_id;
    absl::StatusOr<std::unique_ptr<worker::SyncClient>> client =
        worker::SyncClient::Create(o, manifest_);
    if (!client.ok()) Raise(client.status());
    client_ = std::move(*client);
    absl::StatusOr<Plan> plan =
        Plan::Create(manifest_, o.num_fragments, static_cast<uint32_t>(o.servers.size()));
    if (!plan.ok()) Raise(plan.status());
    MapFragments(*plan);
    claimed_.assign(plan->fragments().size(), false);
    seen_writes_.assign(plan->fragments().size(), 0);
  }

  void Join(double timeout_s) {
    FetchAll();
    if (!error_.empty()) {  // nothing of a model we could not read goes out as theta(0)
      Release();
      ThrowCopyError();
    }
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = client_->Join(host_, absl::Seconds(timeout_s));
    }
    // Refused: nothing is written. Timed out: the fragments that joined are written, the others
    // join in the background (after_step adopts them as they arrive).
    const bool refused = !s.ok() && !absl::IsDeadlineExceeded(s);
    Finish(!refused);
    last_step_ = absl::Now();
    if (s.ok()) return;
    const std::string why = ExplainModelRefusal(s.message(), manifest_, "<your model>");
    Raise(why.empty() ? s : absl::Status(s.code(), absl::StrCat(s.message(), "; ", why)));
  }

  // Once per inner step, after optimizer.step(): the step time is the time since the last call.
  void AfterStep(uint64_t tokens, std::optional<double> loss) {
    const absl::Time now = absl::Now();
    const absl::Duration step =
        last_step_ == absl::InfinitePast() ? absl::ZeroDuration() : now - last_step_;
    Progress(now, tokens, loss);
    {
      py::gil_scoped_release release;
      client_->AfterStep([this](uint64_t offset, uint64_t n) { return Claim(offset, n); }, tokens,
                         step);
    }
    if (claimed_list_.empty()) {
      last_written_.clear();
    } else {
      Finish(true);
    }
    last_step_ = absl::Now();
    in_sync_ += last_step_ - now;
  }

  // The figures its heartbeats carry (worker/sync_client.h): steps, the loss's moving average
  // when given, tokens/s since the first step, and the utilization: the share of the time
  // since then spent outside after_step (training, as far as the learner can tell).
  void Progress(absl::Time now, uint64_t tokens, std::optional<double> loss) {
    if (first_step_ == absl::InfinitePast()) first_step_ = now;
    ++progress_steps_;
    progress_tokens_ += tokens;
    if (loss) loss_ema_ = loss_ema_ ? 0.9 * *loss_ema_ + 0.1 * *loss : *loss;
    worker::SyncClient::Progress p;
    p.step = progress_steps_;
    if (loss_ema_) p.loss = static_cast<float>(*loss_ema_);
    const double s = absl::ToDoubleSeconds(now - first_step_);
    if (s > 0) {
      p.tokens_per_s = static_cast<float>(progress_tokens_ / s);
      p.utilization =
          static_cast<float>(std::clamp(1 - absl::ToDoubleSeconds(in_sync_) / s, 0.0, 1.0));
    }
    p.device = "pytorch";
    client_->SetProgress(p);
  }

  void Drain(double timeout_s) {
    FetchAll();
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = client_->Drain(host_, absl::Seconds(timeout_s));
    }
    Finish(true);
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
    // Downloads: whole fragments, chains of updates (docs/protocol.md, "Keyframes"), rebuilds
    // that did not match the shard's checksum (never expected).
    d["updates_full"] = st.updates_full;
    d["updates_delta"] = st.updates_delta;
    d["download_mismatches"] = st.download_mismatches;
    // Pushes that came later for the shard's hold, and the steps they waited (docs/worker.md,
    // "Alignment").
    d["aligned_pushes"] = st.aligned_pushes;
    d["aligned_steps"] = st.aligned_steps;
    d["joined"] = st.joined;
    d["unacked"] = st.unacked;
    d["mean_staleness"] = st.mean_staleness;
    d["max_staleness"] = st.max_staleness;
    d["inner_steps"] = st.inner_steps_now;
    d["codec"] = kernels::CodecName(st.codec_now);
    d["link_choices"] = st.link_choices;
    d["up_bytes_per_s"] = st.up_bytes_per_s;
    d["down_bytes_per_s"] = st.down_bytes_per_s;
    d["round_need_s"] = st.round_need_s;
    d["round_budget_s"] = st.round_budget_s;
    d["step_time_us"] = st.step_time_us;
    d["fleet_step_time_us"] = st.fleet_step_time_us;
    d["after_step_us"] = st.after_step_us;
    d["versions"] = st.versions;
    // The copies between the parameters and the host buffer, on the training thread.
    d["fetched_fragments"] = fetched_;
    d["stored_fragments"] = stored_;
    d["fetch_us"] = fetch_us_;
    d["store_us"] = store_us_;
    return d;
  }

  // The last refusals and other sync events, as (kind, fragment, detail) tuples.
  std::vector<std::tuple<std::string, uint32_t, std::string>> TakeEvents() {
    std::vector<std::tuple<std::string, uint32_t, std::string>> out;
    for (const worker::SyncEvent& e : client_->TakeEvents())
      out.emplace_back(worker::SyncEventName(e.kind), e.fragment, e.detail);
    return out;
  }

  // The parameters' checksum (upcast to fp32): copies the whole model down, writes nothing.
  uint64_t Checksum() {
    FetchAll();
    Release();
    ThrowCopyError();
    return ParamsChecksum(host_);
  }

  // The fleet's values this learner adopted last, flat fp32 in manifest order (a copy).
  py::array_t<float> GlobalParams() const {
    const std::span<const float> g = client_->global_params();
    py::array_t<float> out(static_cast<py::ssize_t>(g.size()));
    std::memcpy(out.mutable_data(), g.data(), g.size_bytes());
    return out;
  }

  const std::vector<std::vector<Slice>>& fragment_slices() const { return slices_; }
  const std::vector<uint32_t>& last_written() const { return last_written_; }
  bool joined() const { return client_->joined(); }
  uint64_t plan_fingerprint() const { return client_->plan_fingerprint(); }
  uint64_t model_fingerprint() const { return manifest_.fingerprint(); }

 private:
  struct PieceRef {
    uint64_t begin = 0, end = 0;
    uint32_t fragment = 0;
  };

  // Every piece of the plan, sorted by offset (to find a range's fragment), and each
  // fragment's pieces cut at tensor boundaries (what the Python side copies).
  void MapFragments(const Plan& plan) {
    std::vector<uint64_t> starts;  // tensor i: [starts[i], starts[i + 1])
    uint64_t at = 0;
    for (const TensorSpec& t : manifest_.tensors()) {
      starts.push_back(at);
      at += t.numel();
    }
    starts.push_back(at);
    slices_.resize(plan.fragments().size());
    for (const Fragment& f : plan.fragments()) {
      for (const Piece& p : f.pieces) {
        pieces_.push_back({p.flat_offset, p.flat_offset + p.length, f.id});
        uint64_t pos = p.flat_offset;
        const uint64_t end = p.flat_offset + p.length;
        size_t t = static_cast<size_t>(std::upper_bound(starts.begin(), starts.end(), pos) -
                                       starts.begin()) -
                   1;
        for (; pos < end; ++t) {
          const uint64_t stop = std::min(end, starts[t + 1]);
          slices_[f.id].emplace_back(static_cast<uint32_t>(t), pos - starts[t], stop - starts[t],
                                     pos);
          pos = stop;
        }
      }
    }
    std::sort(pieces_.begin(), pieces_.end(),
              [](const PieceRef& a, const PieceRef& b) { return a.begin < b.begin; });
  }

  // The client's ParamsFn (GIL released): the first range of a fragment asked for in this call
  // copies the whole fragment down.
  std::span<float> Claim(uint64_t offset, uint64_t n) {
    auto it = std::upper_bound(pieces_.begin(), pieces_.end(), offset,
                               [](uint64_t v, const PieceRef& p) { return v < p.begin; });
    for (--it; it != pieces_.end() && it->begin < offset + n; ++it) Touch(it->fragment);
    return host_.subspan(offset, n);
  }

  void Touch(uint32_t f) {
    if (claimed_[f]) return;
    claimed_[f] = true;
    claimed_list_.push_back(f);
    const absl::Time t0 = absl::Now();
    py::gil_scoped_acquire gil;
    try {
      fetch_(f);
    } catch (py::error_already_set& e) {
      // The client reads this fragment next: hand it the last adopted values, so a push of it
      // carries nothing, and raise once the client's call returns.
      if (error_.empty()) error_ = e.what();
      for (const auto& [tensor, start, stop, flat] : slices_[f])
        std::memcpy(host_.data() + flat, client_->global_params().data() + flat,
                    (stop - start) * sizeof(float));
    }
    ++fetched_;
    fetch_us_ += absl::ToDoubleMicroseconds(absl::Now() - t0);
  }

  void FetchAll() {
    for (uint32_t f = 0; f < claimed_.size(); ++f) Touch(f);
  }

  // The fragments handed out in this call that the client wrote (see the header comment).
  // Moves the counters on whether or not the caller stores them.
  std::vector<uint32_t> Written() {
    const worker::SyncStats st = client_->stats();
    std::vector<uint32_t> out;
    for (uint32_t f = 0; f < seen_writes_.size(); ++f)
      if (st.local_writes[f] != seen_writes_[f] && claimed_[f]) out.push_back(f);
    seen_writes_ = st.local_writes;
    return out;
  }

  // Forgets the fragments handed out: the parameters move on at the next step.
  void Release() {
    for (uint32_t f : claimed_list_) claimed_[f] = false;
    claimed_list_.clear();
  }

  // After a call that handed fragments out: copies up those written (when `write`).
  void Finish(bool write) {
    std::vector<uint32_t> written = Written();
    if (!write) written.clear();
    Release();
    last_written_ = written;
    if (!written.empty()) {
      const absl::Time t0 = absl::Now();
      store_(written);  // a Python error propagates as itself
      stored_ += written.size();
      store_us_ += absl::ToDoubleMicroseconds(absl::Now() - t0);
    }
    ThrowCopyError();
  }

  void ThrowCopyError() {
    if (error_.empty()) return;
    const std::string e = std::move(error_);
    error_.clear();
    throw std::runtime_error(absl::StrCat(
        "the learner could not copy the parameters to its host buffer (what it pushed of them "
        "carried no change): ",
        e));
  }

  py::array_t<float, py::array::c_style> host_array_;  // keeps the host buffer alive
  std::span<float> host_;
  py::function fetch_;  // fetch(fragment): its parameters into the host buffer, as fp32
  py::function store_;  // store([fragment, ...]): the host buffer into those parameters
  Manifest manifest_;   // this learner's, to name what differs from a shard's that refuses it
  std::unique_ptr<worker::SyncClient> client_;
  std::vector<PieceRef> pieces_;
  std::vector<std::vector<Slice>> slices_;  // per fragment
  std::vector<bool> claimed_;               // per fragment: handed out in this call
  std::vector<uint32_t> claimed_list_;
  std::vector<uint32_t> last_written_;
  std::vector<uint64_t> seen_writes_;  // SyncStats::local_writes when last looked at
  std::string error_;                  // a failed fetch, raised once the client's call returns
  uint64_t fetched_ = 0, stored_ = 0;
  double fetch_us_ = 0, store_us_ = 0;
  absl::Time last_step_ = absl::InfinitePast();
  absl::Time first_step_ = absl::InfinitePast();
  uint64_t progress_steps_ = 0, progress_tokens_ = 0;
  absl::Duration in_sync_;  // inside after_step since the first step
  std::optional<double> loss_ema_;
};

}  // namespace

void BindLearner(py::module_& m) {
  py::class_<Learner>(m, "Learner")
      .def(py::init<std::vector<std::string>, uint32_t, std::vector<std::string>,
                    std::vector<std::vector<int64_t>>, std::vector<std::string>,
                    py::array_t<float, py::array::c_style>, py::function, py::function,
                    const LearnerOptions&>(),
           py::arg("servers"), py::arg("worker_id"), py::arg("names"), py::arg("shapes"),
           py::arg("dtypes"), py::arg("host"), py::arg("fetch"), py::arg("store"),
           py::arg("options"))
      .def("join", &Learner::Join, py::arg("timeout_s"))
      .def("after_step", &Learner::AfterStep, py::arg("tokens"), py::arg("loss") = py::none())
      .def("drain", &Learner::Drain, py::arg("timeout_s"))
      .def("stats", &Learner::Stats)
      .def("take_events", &Learner::TakeEvents)
      .def("checksum", &Learner::Checksum)
      .def("global_params", &Learner::GlobalParams)
      .def("fragment_slices", &Learner::fragment_slices)
      .def("last_written", &Learner::last_written)
      .def_property_readonly("joined", &Learner::joined)
      .def_property_readonly("plan_fingerprint", &Learner::plan_fingerprint)
      .def_property_readonly("model_fingerprint", &Learner::model_fingerprint);
}

}  // namespace diloco::python
