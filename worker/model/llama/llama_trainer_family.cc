#include "worker/model/llama/llama_trainer_family.h"

#include "absl/strings/str_cat.h"
#include "worker/model/llama/llama_model.h"

namespace diloco::model {
namespace {

void InitLlamaModel(LlamaModel<float>& m, uint64_t seed) {
  InitLlama(m.manifest(), seed, m.params());
}

class Family final : public TrainerFamily {
 public:
  std::string_view name() const override { return "llama"; }
  absl::StatusOr<TrainerModel> Model(const std::string& config) const override {
    absl::StatusOr<LlamaConfig> c = ParseLlamaConfig(config);
    if (!c.ok()) return c.status();
    return LlamaTrainerModel(*c);
  }
  // LlamaModel has no forward-only form: an evaluator's model holds gradients too.
  absl::StatusOr<std::unique_ptr<CpuModel>> MakeCpuModel(const TrainerModel& model, int batch,
                                                         int seq_len, bool) const override {
    absl::StatusOr<LlamaConfig> c = Config(model);
    if (!c.ok()) return c.status();
    auto m = LlamaModel<float>::Create(*c, batch, seq_len);
    if (!m.ok()) return m.status();
    const Manifest& manifest = (*m)->manifest();
    return std::unique_ptr<CpuModel>(
        new CpuModelOf<LlamaModel<float>>(*std::move(m), manifest, &InitLlamaModel));
  }
  // What LlamaModel::Create allocates per sequence besides the parameters and gradients: the
  // layers' activations and the readout's, and the backward's buffers (llama_model.cc).
  size_t ForwardBytesPerSequence(const TrainerModel& model, int seq_len) const override {
    absl::StatusOr<LlamaConfig> c = Config(model);
    if (!c.ok()) return 0;
    const size_t T = seq_len, C = c->width, F = c->ffn, V = c->vocab, H = c->heads;
    const size_t kv = C / H * c->kv_heads;
    const size_t layer = T * (2 + 8 * C + 3 * F) + H * T * T;
    const size_t rest = T * (4 * C + 2 * V + 4 * kv + 2 * 3 * F + 3 + C + 1) + T * T;
    return (c->layers * layer + rest) * sizeof(float);
  }

 private:
  static absl::StatusOr<LlamaConfig> Config(const TrainerModel& model) {
    if (model.family != "llama")
      return absl::InvalidArgumentError(
          absl::StrCat("the Llama family cannot build a \"", model.family, "\" model"));
    return ParseLlamaConfig(model.config);
  }
};

}  // namespace

const TrainerFamily& LlamaTrainerFamily() {
  static const Family family;
  return family;
}

TrainerModel LlamaTrainerModel(const LlamaConfig& config) {
  return TrainerModel{.family = "llama",
                      .config = LlamaConfigString(config),
                      .vocab = config.vocab,
                      .context = config.context};
}

}  // namespace diloco::model
