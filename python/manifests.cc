#include "python/manifests.h"

#include <pybind11/numpy.h>
#include <pybind11/stl.h>

#include <tuple>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checksum.h"
#include "common/manifest_json.h"
#include "common/model_source.h"
#include "python/raise.h"

namespace py = pybind11;

namespace diloco::python {
namespace {

// The manifest file `diloco-server --model=manifest:PATH` reads (common/manifest_json.h), written
// atomically; returns the model's fingerprint as 16 hex digits.
std::string WriteManifest(const std::string& path, const std::vector<std::string>& names,
                          const std::vector<std::vector<int64_t>>& shapes,
                          const std::vector<std::string>& dtypes, const std::string& source) {
  std::vector<DeclaredTensor> decls;
  const Manifest m = CheckedManifest(names, shapes, dtypes, path, &decls);
  if (absl::Status s = WriteManifestJson(path, decls, m, source); !s.ok()) Raise(s);
  return absl::StrFormat("%016x", m.fingerprint());
}

using SourceTensor = std::tuple<std::string, std::vector<int64_t>>;

// The tensors a `--model` source names (common/model_source.h: a family preset or spec, hf:DIR,
// manifest:PATH, safetensors:PATH), in its order, and its fingerprint as 16 hex digits. A source
// that cannot be read raises ValueError naming it and the cause.
std::tuple<std::vector<SourceTensor>, std::string> ModelSourceTensors(const std::string& spec) {
  absl::StatusOr<ModelSource> source = LoadModelSource(spec);
  if (!source.ok())
    throw py::value_error(absl::StrCat("model=", spec, ": ", source.status().message()));
  std::vector<SourceTensor> out;
  for (const DeclaredTensor& t : source->tensors) out.emplace_back(t.name, t.shape);
  return {std::move(out), absl::StrFormat("%016x", source->manifest.fingerprint())};
}

}  // namespace

Manifest CheckedManifest(const std::vector<std::string>& names,
                         const std::vector<std::vector<int64_t>>& shapes,
                         const std::vector<std::string>& dtypes, const std::string& source,
                         std::vector<DeclaredTensor>* decls) {
  if (names.size() != shapes.size() || names.size() != dtypes.size())
    throw py::value_error("one shape and one dtype per tensor name");
  for (size_t i = 0; i < names.size(); ++i) decls->push_back({names[i], shapes[i], dtypes[i]});
  absl::StatusOr<Manifest> m = ManifestFromDecls(*decls, source);
  if (!m.ok()) Raise(m.status());
  return *std::move(m);
}

uint64_t ParamsChecksum(std::span<const float> values) {
  return Checksum64(values.data(), values.size_bytes()) & ((uint64_t{1} << 48) - 1);
}

void BindManifests(py::module_& m) {
  m.def(
      "checksum",
      [](py::array_t<float, py::array::c_style> values) {
        return ParamsChecksum(
            std::span<const float>(values.data(), static_cast<size_t>(values.size())));
      },
      py::arg("values"));
  m.def("write_manifest", &WriteManifest, py::arg("path"), py::arg("names"), py::arg("shapes"),
        py::arg("dtypes"), py::arg("source"));
  m.def("model_source", &ModelSourceTensors, py::arg("spec"),
        "The tensors a --model source names, [(name, shape)] in its order, and its fingerprint.");
}

}  // namespace diloco::python
