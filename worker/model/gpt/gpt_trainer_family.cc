#include "worker/model/gpt/gpt_trainer_family.h"

#include "absl/strings/str_cat.h"
#include "worker/model/gpt.h"

namespace diloco::model {
namespace {

void InitGpt(Gpt<float>& gpt, uint64_t seed) { InitGpt2(gpt.layout(), seed, gpt.params()); }

class Family final : public TrainerFamily {
 public:
  std::string_view name() const override { return "gpt"; }
  absl::StatusOr<TrainerModel> Model(const std::string& config) const override {
    absl::StatusOr<GptConfig> c = ParseGptConfig(config);
    if (!c.ok()) return c.status();
    return GptTrainerModel(*c);
  }
  absl::StatusOr<std::unique_ptr<CpuModel>> MakeCpuModel(const TrainerModel& model, int batch,
                                                         int seq_len,
                                                         bool training) const override {
    absl::StatusOr<GptConfig> c = GptConfigOf(model, "the GPT's CPU model");
    if (!c.ok()) return c.status();
    absl::StatusOr<std::unique_ptr<Gpt<float>>> gpt =
        Gpt<float>::Create(*c, batch, seq_len, training);
    if (!gpt.ok()) return gpt.status();
    const Manifest& manifest = (*gpt)->layout().manifest;
    return std::unique_ptr<CpuModel>(
        new CpuModelOf<Gpt<float>>(*std::move(gpt), manifest, &InitGpt));
  }
  size_t ForwardBytesPerSequence(const TrainerModel& model, int seq_len) const override {
    absl::StatusOr<GptConfig> c = ParseGptConfig(model.config);
    return c.ok() ? Gpt<float>::ForwardActivationBytes(*c, 1, seq_len) : 0;
  }
};

}  // namespace

const TrainerFamily& GptTrainerFamily() {
  static const Family family;
  return family;
}

TrainerModel GptTrainerModel(const GptConfig& config) {
  return TrainerModel{.family = "gpt",
                      .config = GptConfigString(config),
                      .vocab = config.vocab,
                      .context = config.context};
}

absl::StatusOr<GptConfig> GptConfigOf(const TrainerModel& model, std::string_view who) {
  if (model.family != "gpt")
    return absl::UnimplementedError(absl::StrCat(std::string(who),
                                                 " runs the GPT family only, not \"", model.family,
                                                 "\" (", model.config, ")"));
  return ParseGptConfig(model.config);
}

}  // namespace diloco::model
