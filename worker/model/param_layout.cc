#include "worker/model/param_layout.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace diloco::model {
namespace {

absl::StatusOr<uint64_t> Offset(const Manifest& m, const std::string& name,
                                std::vector<int64_t> shape) {
  const TensorSpec* t = m.Find(name);
  if (t == nullptr) return absl::InternalError(absl::StrCat("manifest lacks ", name));
  if (t->shape != shape) return absl::InternalError(absl::StrCat("manifest: bad shape of ", name));
  return t->offset;
}

uint64_t SplitMix64(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

absl::StatusOr<ParamLayout> MakeParamLayout(const GptConfig& c) {
  if (c.vocab < 1 || c.context < 1 || c.layers < 1 || c.heads < 1 || c.width < 1)
    return absl::InvalidArgumentError(
        absl::StrCat("model config ", GptConfigString(c), ": all sizes must be positive"));
  if (c.width % c.heads != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("model config ", GptConfigString(c), ": width must be a multiple of heads"));
  absl::StatusOr<Manifest> m = GptManifest(c);
  if (!m.ok()) return m.status();
  ParamLayout p;
  p.config = c;
  p.manifest = *std::move(m);
  p.total = p.manifest.total_elements();
  const int64_t C = c.width;
  absl::Status st;
  auto get = [&](const std::string& name, std::vector<int64_t> shape) -> uint64_t {
    absl::StatusOr<uint64_t> o = Offset(p.manifest, name, std::move(shape));
    if (!o.ok()) {
      st.Update(o.status());
      return 0;
    }
    return *o;
  };
  p.wte = get("wte.weight", {c.vocab, C});
  p.wpe = get("wpe.weight", {c.context, C});
  for (int l = 0; l < c.layers; ++l) {
    const std::string h = absl::StrCat("h.", l, ".");
    LayerOffsets o;
    o.ln1w = get(h + "ln_1.weight", {C});
    o.ln1b = get(h + "ln_1.bias", {C});
    o.qkvw = get(h + "attn.c_attn.weight", {3 * C, C});
    o.qkvb = get(h + "attn.c_attn.bias", {3 * C});
    o.attprojw = get(h + "attn.c_proj.weight", {C, C});
    o.attprojb = get(h + "attn.c_proj.bias", {C});
    o.ln2w = get(h + "ln_2.weight", {C});
    o.ln2b = get(h + "ln_2.bias", {C});
    o.fcw = get(h + "mlp.c_fc.weight", {4 * C, C});
    o.fcb = get(h + "mlp.c_fc.bias", {4 * C});
    o.fcprojw = get(h + "mlp.c_proj.weight", {C, 4 * C});
    o.fcprojb = get(h + "mlp.c_proj.bias", {C});
    p.layers.push_back(o);
  }
  p.lnfw = get("ln_f.weight", {C});
  p.lnfb = get("ln_f.bias", {C});
  if (!st.ok()) return st;
  return p;
}

void InitGpt2(const ParamLayout& layout, uint64_t seed, std::span<float> params) {
  uint64_t s = seed ^ 0x5DEECE66Dull;
  const double kTwoPi = 6.283185307179586;
  const double resid_std = 0.02 / std::sqrt(2.0 * layout.config.layers);
  for (const TensorSpec& t : layout.manifest.tensors()) {
    float* p = params.data() + t.offset;
    const uint64_t n = t.numel();
    const bool is_ln = t.name.find("ln_") != std::string::npos;
    if (t.shape.size() == 1) {
      for (uint64_t i = 0; i < n; ++i) p[i] = (is_ln && t.name.ends_with(".weight")) ? 1.0f : 0.0f;
      continue;
    }
    const bool resid = t.name.ends_with("c_proj.weight");
    const double std = resid ? resid_std : 0.02;
    for (uint64_t i = 0; i < n; i += 2) {
      const double u1 = (double(SplitMix64(s) >> 11) + 1.0) * 0x1.0p-53;  // (0, 1]
      const double u2 = double(SplitMix64(s) >> 11) * 0x1.0p-53;
      const double r = std::sqrt(-2.0 * std::log(u1));
      p[i] = static_cast<float>(std * r * std::cos(kTwoPi * u2));
      if (i + 1 < n) p[i + 1] = static_cast<float>(std * r * std::sin(kTwoPi * u2));
    }
  }
}

}  // namespace diloco::model
