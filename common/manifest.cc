#include "common/manifest.h"

#include <set>

#include "absl/strings/str_cat.h"
#include "common/checksum.h"

namespace diloco {

uint64_t TensorSpec::numel() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

absl::StatusOr<Manifest> Manifest::Create(std::vector<TensorSpec> tensors) {
  if (tensors.empty()) return absl::InvalidArgumentError("manifest: no tensors");
  Manifest m;
  std::set<std::string> names;
  Hasher h;
  h.Update("diloco-manifest-v1:fp32");
  for (auto& t : tensors) {
    if (t.name.empty()) return absl::InvalidArgumentError("manifest: tensor with empty name");
    if (!names.insert(t.name).second)
      return absl::InvalidArgumentError(absl::StrCat("manifest: duplicate tensor ", t.name));
    if (t.shape.empty()) return absl::InvalidArgumentError(absl::StrCat(t.name, ": empty shape"));
    for (int64_t d : t.shape)
      if (d <= 0) return absl::InvalidArgumentError(absl::StrCat(t.name, ": non-positive dim"));
    t.offset = m.total_;
    m.total_ += t.numel();
    h.Update(t.name);
    h.UpdateValue(static_cast<uint64_t>(t.shape.size()));
    for (int64_t d : t.shape) h.UpdateValue(d);
  }
  m.tensors_ = std::move(tensors);
  m.fingerprint_ = h.Digest();
  return m;
}

const TensorSpec* Manifest::Find(const std::string& name) const {
  for (const auto& t : tensors_)
    if (t.name == name) return &t;
  return nullptr;
}

}  // namespace diloco
