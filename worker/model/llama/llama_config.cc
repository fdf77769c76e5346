#include "worker/model/llama/llama_config.h"

#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace diloco {

absl::StatusOr<LlamaConfig> ParseLlamaConfig(const std::string& spec) {
  LlamaConfig c;
  if (spec == "llama-tiny") return c;
  if (spec == "llama-small")
    return LlamaConfig{.vocab = 256,
                       .context = 128,
                       .layers = 4,
                       .heads = 4,
                       .kv_heads = 2,
                       .width = 128,
                       .ffn = 344};
  const auto bad = [&spec] {
    return absl::InvalidArgumentError(
        absl::StrCat("model spec '", spec,
                     "': expected a Llama preset (llama-tiny, llama-small) or "
                     "llama:L=,H=,KV=,C=,F=,T=,V= with positive integers"));
  };
  if (!absl::StartsWith(spec, "llama:")) return bad();
  for (absl::string_view kv : absl::StrSplit(spec.substr(6), ',')) {
    std::vector<std::string> p = absl::StrSplit(kv, '=');
    int v = 0;
    if (p.size() != 2 || !absl::SimpleAtoi(p[1], &v) || v <= 0) return bad();
    if (p[0] == "L")
      c.layers = v;
    else if (p[0] == "H")
      c.heads = v;
    else if (p[0] == "KV")
      c.kv_heads = v;
    else if (p[0] == "C")
      c.width = v;
    else if (p[0] == "F")
      c.ffn = v;
    else if (p[0] == "T")
      c.context = v;
    else if (p[0] == "V")
      c.vocab = v;
    else
      return absl::InvalidArgumentError(
          absl::StrCat("model spec '", spec, "': unknown key ", p[0]));
  }
  if (c.width % c.heads != 0 || c.head_size() % 2 != 0)
    return absl::InvalidArgumentError(absl::StrCat(
        "model spec '", spec, "': width must be heads x an even head size (rotary embedding)"));
  if (c.heads % c.kv_heads != 0)
    return absl::InvalidArgumentError(
        absl::StrCat("model spec '", spec, "': kv heads must divide heads"));
  return c;
}

std::string LlamaConfigString(const LlamaConfig& c) {
  return absl::StrCat("llama:L=", c.layers, ",H=", c.heads, ",KV=", c.kv_heads, ",C=", c.width,
                      ",F=", c.ffn, ",T=", c.context, ",V=", c.vocab);
}

absl::StatusOr<Manifest> LlamaManifest(const LlamaConfig& c) {
  const int64_t C = c.width, KV = int64_t(c.kv_heads) * c.head_size(), F = c.ffn;
  std::vector<TensorSpec> t;
  t.push_back({"model.embed_tokens.weight", {c.vocab, C}});
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = absl::StrCat("model.layers.", l, ".");
    t.push_back({p + "self_attn.q_proj.weight", {C, C}});
    t.push_back({p + "self_attn.k_proj.weight", {KV, C}});
    t.push_back({p + "self_attn.v_proj.weight", {KV, C}});
    t.push_back({p + "self_attn.o_proj.weight", {C, C}});
    t.push_back({p + "mlp.gate_proj.weight", {F, C}});
    t.push_back({p + "mlp.up_proj.weight", {F, C}});
    t.push_back({p + "mlp.down_proj.weight", {C, F}});
    t.push_back({p + "input_layernorm.weight", {C}});
    t.push_back({p + "post_attention_layernorm.weight", {C}});
  }
  t.push_back({"model.norm.weight", {C}});
  t.push_back({"lm_head.weight", {c.vocab, C}});
  return Manifest::Create(std::move(t));
}

}  // namespace diloco
