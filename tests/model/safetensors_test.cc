// safetensors: round trip through the writer, the manifest gather, and malformed files.
#include "worker/model/safetensors.h"

#include <filesystem>
#include <fstream>
#include <random>

#include "gtest/gtest.h"
#include "worker/data/token_file.h"
#include "worker/model/evaluate.h"
#include "worker/model/gpt.h"

namespace diloco::model {
namespace {

class SafetensorsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("model_st_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const char* n) { return (dir_ / n).string(); }
  void WriteRaw(const std::string& path, const std::string& header, size_t data_bytes) {
    std::string b(8, '\0');
    for (int i = 0; i < 8; ++i) b[i] = static_cast<char>(uint64_t(header.size()) >> (8 * i));
    b += header;
    b.append(data_bytes, '\0');
    std::ofstream(path, std::ios::binary) << b;
  }
  std::filesystem::path dir_;
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
  auto all = ReadSafetensors(Path("m.safetensors"));
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->metadata.at("format"), "pt");
  EXPECT_EQ(all->tensors.at("h.1.mlp.c_fc.weight").shape, (std::vector<int64_t>{32, 8}));
  // Data starts 8-aligned.
  std::ifstream f(Path("m.safetensors"), std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ((8 + n) % 8, 0u);
}

TEST_F(SafetensorsTest, ReadsForeignHeaderWithSpacesAndEscapes) {
  WriteRaw(Path("a.safetensors"),
           "{ \"__metadata__\" : {\"k\":\"v\\\"\\u0041\"}, \"x\\/y\": {\"dtype\":\"F32\", "
           "\"shape\":[2], \"data_offsets\":[0,8]}, \"z\":{\"dtype\":\"BF16\",\"shape\":[1,2],"
           "\"data_offsets\":[8,12]} }   ",
           12);
  auto r = ReadSafetensors(Path("a.safetensors"));
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->metadata.at("k"), "v\"A");
  EXPECT_EQ(r->tensors.at("x/y").data.size(), 2u);
  EXPECT_EQ(r->tensors.at("z").dtype, "BF16");
}

TEST_F(SafetensorsTest, RejectsMalformed) {
  const char* cases[][2] = {
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", "span"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,800]}}", "outside"},
      {"{\"a\":{\"dtype\":\"Q7\",\"shape\":[2],\"data_offsets\":[0,8]}}", "dtype"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", "non-negative"},
      {"{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
       "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
       "overlap"},
      {"{\"a\":", "json"},
      {"[1,2]", "object"},
  };
  for (auto& c : cases) {
    WriteRaw(Path("bad.safetensors"), c[0], 8);
    auto r = ReadSafetensors(Path("bad.safetensors"));
    EXPECT_FALSE(r.ok()) << c[0];
    EXPECT_NE(r.status().message().find(c[1]), std::string::npos) << r.status();
  }
  // Header length beyond the file.
  std::ofstream(Path("len.safetensors"), std::ios::binary)
      << std::string("\xff\x00\x00\x00\x00\x00\x00\x00{}", 10);
  EXPECT_EQ(ReadSafetensors(Path("len.safetensors")).status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(SafetensorsTest, MissingTensorIsNamed) {
  const GptConfig c{.vocab = 20, .context = 8, .layers = 1, .heads = 2, .width = 8};
  auto layout = MakeParamLayout(c);
  WriteRaw(Path("e.safetensors"), "{}", 0);
  auto r = ReadSafetensorsParams(Path("e.safetensors"), layout->manifest);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find("wte.weight"), std::string::npos);
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
  auto loss = SafetensorsLoss(Path("m.safetensors"), Path("d.bin"), c);
  ASSERT_TRUE(loss.ok()) << loss.status();
  std::vector<int32_t> in(128), tg(128);
  for (int i = 0; i < 128; ++i) {
    in[i] = toks[i];
    tg[i] = toks[i + 1];
  }
  EXPECT_NEAR(*loss, (*g)->Forward(in.data(), tg.data()), 1e-5);
  EXPECT_TRUE(EvaluateSafetensors(Path("m.safetensors"), Path("d.bin"), c).ok());
}

}  // namespace
}  // namespace diloco::model
