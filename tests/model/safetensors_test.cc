// The model's safetensors adapter: round trip through the manifest, missing and mis-shaped
// tensors, and evaluation of a saved model. (The format itself: tests/common/.)
#include "worker/model/safetensors.h"

#include <filesystem>
#include <fstream>
#include <random>

#include "common/safetensors.h"
#include "gtest/gtest.h"
#include "tests/util/temp_dir.h"
#include "worker/data/token_file.h"
#include "worker/model/evaluate.h"
#include "worker/model/gpt.h"
#include "worker/model/gpt/gpt_trainer_family.h"

namespace diloco::model {
namespace {

class SafetensorsTest : public ::testing::Test {
 protected:
  std::string Path(const char* n) { return dir_.Sub(n); }
  void WriteRaw(const std::string& path, const std::string& header, size_t data_bytes) {
    std::string b(8, '\0');
    for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(uint64_t(header.size()) >> (8 * i));
    b += header;
    b.append(data_bytes, '\0');
    std::ofstream(path, std::ios::binary) << b;
  }
  diloco::testing::TempDir dir_{"model_st_test_"};
};

TEST_F(SafetensorsTest, RoundTripThroughManifest) {
  const GptConfig c{.vocab = 20, .context = 8, .layers = 2, .heads = 2, .width = 8};
  auto layout = MakeParamLayout(c);
  ASSERT_TRUE(layout.ok());
  std::vector<float> p(layout->total);
  std::mt19937 rng(1);
  for (float& x : p) x = std::uniform_real_distribution<float>(-1, 1)(rng);
  ASSERT_TRUE(
      WriteSafetensors(Path("m.safetensors"), layout->manifest, p, {{"format", "pt"}}).ok());
  auto back = ReadSafetensorsParams(Path("m.safetensors"), layout->manifest);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(*back, p);
  auto all = diloco::ReadSafetensors(Path("m.safetensors"));
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->metadata.at("format"), "pt");
  bool found = false;
  for (const auto& t : all->tensors)
    if (t.name == "h.1.mlp.c_fc.weight") {
      found = true;
      EXPECT_EQ(t.shape, (std::vector<int64_t>{32, 8}));
    }
  EXPECT_TRUE(found);
  // Data starts 8-aligned.
  std::ifstream f(Path("m.safetensors"), std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
}

TEST_F(SafetensorsTest, MissingTensorIsNamed) {
  const GptConfig c{.vocab = 20, .context = 8, .layers = 1, .heads = 2, .width = 8};
  auto layout = MakeParamLayout(c);
  WriteRaw(Path("e.safetensors"), "{}", 0);
  auto r = ReadSafetensorsParams(Path("e.safetensors"), layout->manifest);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("wte.weight"), std::string::npos);
}

TEST_F(SafetensorsTest, MisShapedTensorIsRefused) {
  const GptConfig c{.vocab = 20, .context = 8, .layers = 1, .heads = 2, .width = 8};
  const GptConfig wider{.vocab = 20, .context = 8, .layers = 1, .heads = 2, .width = 16};
  auto small = MakeParamLayout(c), big = MakeParamLayout(wider);
  std::vector<float> p(big->total, 0.5f);
  ASSERT_TRUE(WriteSafetensors(Path("w.safetensors"), big->manifest, p).ok());
  auto r = ReadSafetensorsParams(Path("w.safetensors"), small->manifest);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("shape"), std::string::npos) << r.status();
  EXPECT_FALSE(WriteSafetensors(Path("x.safetensors"), small->manifest, p).ok());
}

TEST_F(SafetensorsTest, EvaluateSafetensorsMatchesModel) {
  const GptConfig c{.vocab = 30, .context = 16, .layers = 1, .heads = 2, .width = 16};
  auto g = Gpt<float>::Create(c, 8, 16);
  ASSERT_TRUE(g.ok());
  InitGpt2((*g)->layout(), 3, (*g)->params());
  std::vector<uint16_t> toks(8 * 16 + 1);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<uint16_t>((i * 7) % 30);
  ASSERT_TRUE(data::WriteTokenFile(Path("d.bin"), toks).ok());
  ASSERT_TRUE(
      WriteSafetensors(Path("m.safetensors"), (*g)->layout().manifest, (*g)->params()).ok());
  auto loss = SafetensorsLoss(Path("m.safetensors"), Path("d.bin"), GptTrainerModel(c));
  ASSERT_TRUE(loss.ok()) << loss.status();
  std::vector<int32_t> in(128), tg(128);
  for (int i = 0; i < 128; ++i) {
    in[i] = toks[i];
    tg[i] = toks[i + 1];
  }
  EXPECT_NEAR(*loss, (*g)->Forward(in.data(), tg.data()), 1e-5);
  EXPECT_TRUE(EvaluateSafetensors(Path("m.safetensors"), Path("d.bin"), GptTrainerModel(c)).ok());
}

}  // namespace
}  // namespace diloco::model
