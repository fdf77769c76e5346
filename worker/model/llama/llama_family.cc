#include "worker/model/llama/llama_family.h"

#include "absl/strings/match.h"
#include "worker/model/llama/llama_config.h"
#include "worker/model/llama/llama_hf.h"

namespace diloco {
namespace {

class Llama final : public ModelFamily {
 public:
  absl::string_view name() const override { return "llama"; }
  bool Claims(absl::string_view spec) const override { return absl::StartsWith(spec, "llama"); }
  std::string Usage() const override {
    return "a Llama preset (llama-tiny, llama-small) or spec llama:L=..,H=..,KV=..,C=..,F=..,"
           "T=..,V=..";
  }
  absl::StatusOr<FamilyModel> Parse(const std::string& spec) const override {
    absl::StatusOr<LlamaConfig> c = ParseLlamaConfig(spec);
    if (!c.ok()) return c.status();
    absl::StatusOr<Manifest> m = LlamaManifest(*c);
    if (!m.ok()) return m.status();
    return FamilyModel{LlamaConfigString(*c), *std::move(m)};
  }
  absl::Status WriteHf(const std::string& dir, const std::string& config, const Manifest& manifest,
                       std::span<const float> params,
                       std::map<std::string, std::string> metadata) const override {
    absl::StatusOr<LlamaConfig> c = ParseLlamaConfig(config);
    if (!c.ok()) return c.status();
    return WriteLlamaHfModel(dir, *c, manifest, params, std::move(metadata));
  }
  absl::StatusOr<std::vector<float>> FlatFromHf(const SafetensorsFile& file,
                                                const Manifest& manifest,
                                                const std::string& path) const override {
    return FlatFromLlamaHf(file, manifest, path);
  }
};

}  // namespace

const ModelFamily& LlamaFamily() {
  static const Llama* const family = new Llama;
  return *family;
}

}  // namespace diloco
