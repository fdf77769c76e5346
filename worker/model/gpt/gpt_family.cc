#include "worker/model/gpt/gpt_family.h"

#include "absl/strings/str_cat.h"
#include "worker/model/gpt/gpt_config.h"
#include "worker/model/gpt/gpt_hf.h"

namespace diloco {
namespace {

class Gpt final : public ModelFamily {
 public:
  absl::string_view name() const override { return "gpt"; }
  bool Claims(absl::string_view) const override { return true; }
  std::string Usage() const override {
    return "a GPT preset (tiny, small, gpt2-124m, gpt2-350m) or spec L=..,H=..,C=..,T=..,V=..";
  }
  absl::StatusOr<FamilyModel> Parse(const std::string& spec) const override {
    absl::StatusOr<GptConfig> c = ParseGptConfig(spec);
    if (!c.ok()) return c.status();
    absl::StatusOr<Manifest> m = GptManifest(*c);
    if (!m.ok()) return m.status();
    return FamilyModel{GptConfigString(*c), *std::move(m)};
  }
  absl::Status WriteHf(const std::string& dir, const std::string& config, const Manifest& manifest,
                       std::span<const float> params,
                       std::map<std::string, std::string> metadata) const override {
    absl::StatusOr<GptConfig> c = ParseGptConfig(config);
    if (!c.ok()) return c.status();
    return WriteHfModel(dir, *c, manifest, params, std::move(metadata));
  }
  absl::StatusOr<std::vector<float>> FlatFromHf(const SafetensorsFile& file,
                                                const Manifest& manifest,
                                                const std::string& path) const override {
    return diloco::FlatFromHf(file, manifest, path);
  }
};

}  // namespace

const ModelFamily& GptFamily() {
  static const Gpt* const family = new Gpt;
  return *family;
}

}  // namespace diloco
