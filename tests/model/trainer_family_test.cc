// The C++ trainer's model families (worker/model/trainer_family.h): every family of the
// registry (common/model_family.h) has its trainer half, whose CPU network is the family's
// manifest for each preset; an unknown family is refused naming the ones there are. The Llama
// family reached as the worker reaches it (MakeCpuTrainer with a TrainerModel of "llama"): on
// the CI job's synthetic data it learns (held-out loss well down in 150 steps), its parameters
// are llama-tiny's manifest, the same seed gives the same run, and the CUDA trainer refuses it.
#include "worker/model/trainer_family.h"

#include <cmath>
#include <vector>

#include "common/model_family.h"
#include "common/model_source.h"
#include "gtest/gtest.h"
#include "worker/model/cpu_trainer.h"
#include "worker/model/evaluate.h"
#include "worker/model/llama/llama_config.h"
#include "worker/model/llama/llama_trainer_family.h"
#include "worker/model/presets.h"
#if defined(DILOCO_MODEL_HAVE_CUDA)
#include "worker/model/cuda/cuda_trainer.h"
#endif

namespace diloco::model {
namespace {

TrainerOptions LlamaOptions() {
  TrainerOptions o = CiTrainingOptions();
  o.model = LlamaTrainerModel(*ParseLlamaConfig("llama-tiny"));
  o.batch_size = 4;
  o.seq_len = 32;
  o.decay_steps = 150;
  return o;
}

// Each registered family's presets: the trainer half reads the config the registry records back
// into the same model (vocabulary, context) and builds a CPU network of exactly its manifest.
TEST(TrainerFamilyTest, EveryRegisteredFamilyTrainsItsOwnManifest) {
  const std::vector<const ModelFamily*> families = ModelFamilies();
  ASSERT_GE(families.size(), 2u);
  for (const ModelFamily* f : families) {
    const std::string name(f->name());
    ASSERT_NE(FindTrainerFamily(name), nullptr) << name;
    for (const std::string spec :
         {name == "gpt" ? "tiny" : "llama-tiny",
          name == "gpt" ? "L=1,H=2,C=16,T=8,V=40" : "llama:L=1,H=2,KV=1,C=16,F=24,T=8,V=40"}) {
      auto source = LoadModelSource(spec);
      ASSERT_TRUE(source.ok()) << source.status();
      ASSERT_EQ(source->family, name) << spec;
      auto model = ResolveTrainerModel(source->family, source->config);
      ASSERT_TRUE(model.ok()) << model.status();
      EXPECT_EQ(model->config, source->config);
      auto cpu = MakeCpuModel(*model, 2, model->context);
      ASSERT_TRUE(cpu.ok()) << cpu.status();
      EXPECT_EQ((*cpu)->manifest().fingerprint(), source->manifest.fingerprint()) << spec;
      EXPECT_EQ((*cpu)->grads().size(), (*cpu)->params().size());
      const size_t one = FindTrainerFamily(name)->ForwardBytesPerSequence(*model, model->context);
      EXPECT_GT(one, 0u) << spec;
    }
  }
}

TEST(TrainerFamilyTest, AnUnknownFamilyIsRefusedNamingTheFamiliesThereAre) {
  auto m = ResolveTrainerModel("mamba", "x");
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("\"mamba\" (it trains: gpt, llama)"), std::string::npos)
      << m.status();
  TrainerOptions o = CiTrainingOptions();
  o.model.family = "mamba";
  EXPECT_FALSE(MakeCpuTrainer(o).ok());
  o.model = TrainerModel{};
  auto t = MakeCpuTrainer(o);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("no model to train"), std::string::npos) << t.status();
}

// The evaluator scores a family's parameters as its trainer does (same network, same batches).
TEST(TrainerFamilyTest, TheEvaluatorScoresALlamaAsItsTrainerDoes) {
  auto t = MakeCpuTrainer(LlamaOptions());
  ASSERT_TRUE(t.ok()) << t.status();
  for (int i = 0; i < 5; ++i) (*t)->Step();
  auto e = Evaluator::Create(LlamaOptions());
  ASSERT_TRUE(e.ok()) << e.status();
  auto loss = (*e)->Evaluate((*t)->params());
  ASSERT_TRUE(loss.ok()) << loss.status();
  EXPECT_FLOAT_EQ(static_cast<float>(*loss), (*t)->EvalLoss());
}

TEST(LlamaTrainerTest, LearnsTheSyntheticDataAndIsLlamaTinysManifest) {
  auto t = MakeCpuTrainer(LlamaOptions());
  ASSERT_TRUE(t.ok()) << t.status();
  Trainer& tr = **t;
  EXPECT_EQ(tr.manifest().fingerprint(), LoadModelSource("llama-tiny")->manifest.fingerprint());
  EXPECT_EQ(tr.tokens_per_step(), 4u * 32u);
  const float before = tr.EvalLoss();
  EXPECT_NEAR(before, std::log(256.0), 0.2);
  float loss = 0;
  for (int i = 0; i < 150; ++i) loss = tr.Step();
  EXPECT_TRUE(std::isfinite(loss));
  const float after = tr.EvalLoss();
  EXPECT_LT(after, 0.75f * before) << "before " << before << " after " << after;
  ASSERT_TRUE(tr.optimizer_state().has_value());
  EXPECT_EQ(tr.optimizer_state()->step, 150);
}

TEST(LlamaTrainerTest, TheSameSeedsGiveTheSameParameters) {
  auto a = MakeCpuTrainer(LlamaOptions());
  auto b = MakeCpuTrainer(LlamaOptions());
  ASSERT_TRUE(a.ok() && b.ok());
  for (int i = 0; i < 3; ++i) EXPECT_EQ((*a)->Step(), (*b)->Step());
  const std::span<float> pa = (*a)->params(), pb = (*b)->params();
  EXPECT_TRUE(std::equal(pa.begin(), pa.end(), pb.begin()));
}

TEST(LlamaTrainerTest, SeqLenBeyondTheLlamaContextIsRefused) {
  TrainerOptions o = LlamaOptions();
  o.seq_len = 65;
  auto t = MakeCpuTrainer(o);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("context 64"), std::string::npos) << t.status();
}

#if defined(DILOCO_MODEL_HAVE_CUDA)
TEST(LlamaTrainerTest, TheCudaTrainerRefusesTheLlamaFamily) {
  auto t = MakeCudaTrainer(LlamaOptions());
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("the CUDA trainer runs the GPT family only, not \"llama\""),
            std::string::npos)
      << t.status();
}
#endif

}  // namespace
}  // namespace diloco::model
