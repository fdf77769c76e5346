#include "common/tensor_decl.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace diloco {
namespace {

constexpr uint64_t kMaxElements = uint64_t{1} << 40;  // per dimension and per tensor

}  // namespace

std::optional<int> FloatDtypeBytes(const std::string& dtype) {
  if (dtype == "F64") return 8;
  if (dtype == "F32") return 4;
  if (dtype == "F16" || dtype == "BF16") return 2;
  if (dtype == "F8_E4M3" || dtype == "F8_E5M2") return 1;
  return std::nullopt;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ","), "]");
}

absl::Status CheckDeclared(const DeclaredTensor& t, const std::string& source) {
  if (t.name.empty())
    return absl::InvalidArgumentError(absl::StrCat(source, ": a tensor has no name"));
  if (!t.dtype.empty() && !FloatDtypeBytes(t.dtype))
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": tensor ", t.name, " has dtype ", t.dtype,
        "; only floating-point tensors (F64, F32, F16, BF16, F8_E4M3, F8_E5M2) are parameters "
        "a learner can push"));
  if (t.shape.empty())
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": tensor ", t.name,
                     " is a scalar (shape []); a manifest tensor needs at least one dimension"));
  for (int64_t d : t.shape)
    if (d <= 0)
      return absl::InvalidArgumentError(absl::StrCat(source, ": tensor ", t.name,
                                                     " is empty (shape ", ShapeString(t.shape),
                                                     "); every dimension must be positive"));
  uint64_t numel = 1;
  for (int64_t d : t.shape) {
    const uint64_t dim = static_cast<uint64_t>(d);  // positive: checked above
    if (numel > kMaxElements / dim)                 // checked before it could overflow
      return absl::InvalidArgumentError(absl::StrCat(source, ": tensor ", t.name, " (shape ",
                                                     ShapeString(t.shape), ") is too large"));
    numel *= dim;
  }
  return absl::OkStatus();
}

absl::StatusOr<Manifest> ManifestFromDecls(const std::vector<DeclaredTensor>& tensors,
                                           const std::string& source) {
  if (tensors.empty()) return absl::InvalidArgumentError(absl::StrCat(source, ": no tensors"));
  std::set<std::string> names;
  std::vector<TensorSpec> specs;
  specs.reserve(tensors.size());
  for (const DeclaredTensor& t : tensors) {
    if (absl::Status s = CheckDeclared(t, source); !s.ok()) return s;
    if (!names.insert(t.name).second)
      return absl::InvalidArgumentError(
          absl::StrCat(source, ": tensor ", t.name, " is declared twice"));
    specs.push_back({t.name, t.shape});
  }
  absl::StatusOr<Manifest> m = Manifest::Create(std::move(specs));
  if (!m.ok()) return absl::InvalidArgumentError(absl::StrCat(source, ": ", m.status().message()));
  return m;
}

}  // namespace diloco
