#include "worker/model/gpt/gpt_hf.h"

#include <algorithm>
#include <map>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/event_log.h"

namespace diloco {

bool IsHfConv1D(const std::string& name) {
  return absl::StartsWith(name, "h.") &&
         (absl::EndsWith(name, ".attn.c_attn.weight") ||
          absl::EndsWith(name, ".attn.c_proj.weight") || absl::EndsWith(name, ".mlp.c_fc.weight") ||
          absl::EndsWith(name, ".mlp.c_proj.weight"));
}

std::vector<SafetensorsTensor> HfTensors(const Manifest& manifest, std::span<const float> params,
                                         std::vector<std::vector<float>>* scratch) {
  std::vector<SafetensorsTensor> out;
  scratch->clear();
  scratch->reserve(manifest.tensors().size());
  for (const TensorSpec& t : manifest.tensors()) {
    const std::span<const float> values = params.subspan(t.offset, t.numel());
    const std::string name = "transformer." + t.name;
    if (!IsHfConv1D(t.name)) {
      out.push_back({name, t.shape, values});
      continue;
    }
    const int64_t rows = t.shape[0], cols = t.shape[1];  // [out, in]
    std::vector<float>& m = scratch->emplace_back(values.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) m[size_t(c * rows + r)] = values[size_t(r * cols + c)];
    out.push_back({name, {cols, rows}, m});
  }
  return out;
}

absl::StatusOr<std::vector<float>> FlatFromHf(const SafetensorsFile& file, const Manifest& manifest,
                                              const std::string& path) {
  std::map<std::string, const LoadedTensor*> by_name;
  for (const LoadedTensor& t : file.tensors) by_name[t.name] = &t;
  std::vector<float> flat(manifest.total_elements());
  for (const TensorSpec& spec : manifest.tensors()) {
    const std::string name = "transformer." + spec.name;
    auto it = by_name.find(name);
    if (it == by_name.end()) return absl::NotFoundError(absl::StrCat(path, ": no tensor ", name));
    const LoadedTensor& t = *it->second;
    const bool conv1d = IsHfConv1D(spec.name);
    const std::vector<int64_t> want =
        conv1d ? std::vector<int64_t>{spec.shape[1], spec.shape[0]} : spec.shape;
    if (t.shape != want)
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor ", name, " has shape [", absl::StrJoin(t.shape, ","),
                       "], GPT-2 of this size needs [", absl::StrJoin(want, ","), "]",
                       conv1d ? " (Conv1D: [in, out])" : ""));
    float* out = flat.data() + spec.offset;
    if (!conv1d) {
      std::copy(t.data.begin(), t.data.end(), out);
    } else {
      const int64_t rows = spec.shape[0], cols = spec.shape[1];  // ours: [out, in]
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = t.data[size_t(c * rows + r)];
    }
    by_name.erase(it);
  }
  for (const auto& [name, t] : by_name) {
    if (name == "lm_head.weight") {
      const TensorSpec* wte = manifest.Find("wte.weight");
      if (wte == nullptr || t->shape != wte->shape ||
          !std::equal(t->data.begin(), t->data.end(), flat.begin() + wte->offset))
        return absl::InvalidArgumentError(
            absl::StrCat(path,
                         ": tensor lm_head.weight differs from transformer.wte.weight; "
                         "this model ties its head to the token embedding"));
      continue;
    }
    if (absl::EndsWith(name, ".attn.bias") || absl::EndsWith(name, ".attn.masked_bias")) continue;
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": tensor ", name, " is not a parameter of this GPT-2"));
  }
  return flat;
}

std::string HfConfigJson(const GptConfig& c) {
  const nlohmann::ordered_json j = {
      {"architectures", nlohmann::ordered_json::array({"GPT2LMHeadModel"})},
      {"model_type", "gpt2"},
      {"vocab_size", c.vocab},
      {"n_positions", c.context},
      {"n_ctx", c.context},
      {"n_embd", c.width},
      {"n_layer", c.layers},
      {"n_head", c.heads},
      {"n_inner", nullptr},  // GPT2Config's default: 4 * n_embd
      {"activation_function", "gelu_new"},
      {"layer_norm_epsilon", 1e-5},
      {"initializer_range", 0.02},
      {"resid_pdrop", 0.0},
      {"embd_pdrop", 0.0},
      {"attn_pdrop", 0.0},
      {"tie_word_embeddings", true},
      {"scale_attn_weights", true},
      {"torch_dtype", "float32"},
  };
  return JsonDump(j) + "\n";
}

absl::Status WriteHfModel(const std::string& dir, const GptConfig& config, const Manifest& manifest,
                          std::span<const float> params,
                          std::map<std::string, std::string> metadata) {
  if (params.size() != manifest.total_elements())
    return absl::InvalidArgumentError(absl::StrCat(
        "hf export: ", params.size(), " parameters, the model has ", manifest.total_elements()));
  std::vector<std::vector<float>> scratch;
  const std::vector<SafetensorsTensor> tensors = HfTensors(manifest, params, &scratch);
  return WriteHfFolder(dir, HfConfigJson(config), tensors, std::move(metadata));
}

}  // namespace diloco
