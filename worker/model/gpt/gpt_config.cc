#include "worker/model/gpt/gpt_config.h"

#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace diloco {

absl::StatusOr<GptConfig> ParseGptConfig(const std::string& spec) {
  GptConfig c;
  if (spec == "tiny") return c;
  if (spec == "small") return GptConfig{256, 128, 4, 4, 128};
  if (spec == "gpt2-124m") return GptConfig{50257, 1024, 12, 12, 768};
  if (spec == "gpt2-350m") return GptConfig{50257, 1024, 24, 16, 1024};
  for (absl::string_view kv : absl::StrSplit(spec, ',')) {
    std::vector<std::string> p = absl::StrSplit(kv, '=');
    int v = 0;
    if (p.size() != 2 || !absl::SimpleAtoi(p[1], &v) || v <= 0)
      return absl::InvalidArgumentError(
          absl::StrCat("model spec '", spec, "': expected a preset (tiny, small, gpt2-124m, ",
                       "gpt2-350m) or L=,H=,C=,T=,V= with positive integers"));
    if (p[0] == "L")
      c.layers = v;
    else if (p[0] == "H")
      c.heads = v;
    else if (p[0] == "C")
      c.width = v;
    else if (p[0] == "T")
      c.context = v;
    else if (p[0] == "V")
      c.vocab = v;
    else
      return absl::InvalidArgumentError(absl::StrCat("model spec: unknown key ", p[0]));
  }
  if (c.width % c.heads != 0)
    return absl::InvalidArgumentError("model spec: width must be a multiple of heads");
  return c;
}

std::string GptConfigString(const GptConfig& c) {
  return absl::StrCat("L=", c.layers, ",H=", c.heads, ",C=", c.width, ",T=", c.context,
                      ",V=", c.vocab);
}

absl::StatusOr<Manifest> GptManifest(const GptConfig& c) {
  const int64_t C = c.width;
  std::vector<TensorSpec> t;
  t.push_back({"wte.weight", {c.vocab, C}});
  t.push_back({"wpe.weight", {c.context, C}});
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = absl::StrCat("h.", l, ".");
    t.push_back({p + "ln_1.weight", {C}});
    t.push_back({p + "ln_1.bias", {C}});
    t.push_back({p + "attn.c_attn.weight", {3 * C, C}});
    t.push_back({p + "attn.c_attn.bias", {3 * C}});
    t.push_back({p + "attn.c_proj.weight", {C, C}});
    t.push_back({p + "attn.c_proj.bias", {C}});
    t.push_back({p + "ln_2.weight", {C}});
    t.push_back({p + "ln_2.bias", {C}});
    t.push_back({p + "mlp.c_fc.weight", {4 * C, C}});
    t.push_back({p + "mlp.c_fc.bias", {4 * C}});
    t.push_back({p + "mlp.c_proj.weight", {C, 4 * C}});
    t.push_back({p + "mlp.c_proj.bias", {C}});
  }
  t.push_back({"ln_f.weight", {C}});
  t.push_back({"ln_f.bias", {C}});
  return Manifest::Create(std::move(t));
}

}  // namespace diloco
