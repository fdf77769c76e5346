#include "worker/model/llama/llama_hf.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/event_log.h"

namespace diloco {

std::string LlamaHfConfigJson(const LlamaConfig& c) {
  const nlohmann::ordered_json j = {
      {"architectures", nlohmann::ordered_json::array({"LlamaForCausalLM"})},
      {"model_type", "llama"},
      {"vocab_size", c.vocab},
      {"max_position_embeddings", c.context},
      {"hidden_size", c.width},
      {"intermediate_size", c.ffn},
      {"num_hidden_layers", c.layers},
      {"num_attention_heads", c.heads},
      {"num_key_value_heads", c.kv_heads},
      {"hidden_act", "silu"},
      {"rms_norm_eps", c.rms_eps},
      {"rope_theta", c.rope_theta},
      {"attention_bias", false},
      {"mlp_bias", false},
      {"attention_dropout", 0.0},
      {"initializer_range", 0.02},
      {"tie_word_embeddings", false},
      {"torch_dtype", "float32"},
  };
  return JsonDump(j) + "\n";
}

absl::Status WriteLlamaHfModel(const std::string& dir, const LlamaConfig& config,
                               const Manifest& manifest, std::span<const float> params,
                               std::map<std::string, std::string> metadata) {
  absl::StatusOr<std::vector<SafetensorsTensor>> tensors = ManifestTensors(manifest, params);
  if (!tensors.ok()) return tensors.status();
  return WriteHfFolder(dir, LlamaHfConfigJson(config), *tensors, std::move(metadata));
}

absl::StatusOr<std::vector<float>> FlatFromLlamaHf(const SafetensorsFile& file,
                                                   const Manifest& manifest,
                                                   const std::string& path) {
  std::map<std::string, const LoadedTensor*> by_name;
  for (const LoadedTensor& t : file.tensors) by_name[t.name] = &t;
  std::vector<float> flat(manifest.total_elements());
  for (const TensorSpec& spec : manifest.tensors()) {
    auto it = by_name.find(spec.name);
    if (it == by_name.end())
      return absl::NotFoundError(absl::StrCat(path, ": no tensor ", spec.name));
    if (it->second->shape != spec.shape)
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor ", spec.name, " has shape [", absl::StrJoin(it->second->shape, ","),
          "], Llama of this size needs [", absl::StrJoin(spec.shape, ","), "]"));
    std::copy(it->second->data.begin(), it->second->data.end(), flat.begin() + spec.offset);
    by_name.erase(it);
  }
  for (const auto& [name, t] : by_name)
    if (!absl::EndsWith(name, ".rotary_emb.inv_freq"))
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor ", name, " is not a parameter of this Llama"));
  return flat;
}

}  // namespace diloco
