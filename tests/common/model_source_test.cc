// --model's sources of any model (common/model_source.h): a safetensors file's header, a
// Hugging Face folder (one file or a sharded index), a manifest JSON file. Each is parsed into
// the same manifest; tied weights appear once; every refusal (a duplicate name, an empty
// tensor, a non-float dtype, a header whose offsets or sizes lie, a missing config.json or
// index, a malformed manifest) names the cause and the tensor.
#include "common/model_source.h"

#include <cstring>
#include <filesystem>
#include <fstream>

#include "common/manifest_json.h"
#include "common/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/storage/test_util.h"
#include "worker/model/gpt/gpt_config.h"

namespace diloco {
namespace {

using storage::testutil::TempDir;
using ::testing::HasSubstr;

// A safetensors file of `header` (JSON, as given: it may lie) and `data_bytes` zero bytes.
void WriteRaw(const std::filesystem::path& path, const std::string& header, size_t data_bytes) {
  std::ofstream out(path, std::ios::binary);
  const uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << std::string(data_bytes, '\0');
}

void WriteText(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

// A small Llama-like model's header: BF16 tensors, embed and head tied over the same bytes.
std::string LlamaHeader() {
  return R"({"__metadata__":{"format":"pt"},
    "model.embed_tokens.weight":{"dtype":"BF16","shape":[32,8],"data_offsets":[0,512]},
    "lm_head.weight":{"dtype":"BF16","shape":[32,8],"data_offsets":[0,512]},
    "model.layers.0.self_attn.q_proj.weight":{"dtype":"BF16","shape":[8,8],"data_offsets":[512,640]},
    "model.layers.0.input_layernorm.weight":{"dtype":"F32","shape":[8],"data_offsets":[640,672]},
    "model.norm.weight":{"dtype":"F16","shape":[8],"data_offsets":[672,688]}})";
}

std::string Error(const std::string& spec) {
  auto s = LoadModelSource(spec);
  EXPECT_FALSE(s.ok()) << spec;
  return s.ok() ? "" : std::string(s.status().message());
}

TEST(ModelSourceTest, SafetensorsHeaderGivesNamesShapesAndDtypesInDataOrder) {
  TempDir dir;
  const std::string path = dir.Sub("m.safetensors");
  WriteRaw(path, LlamaHeader(), 688);
  auto s = LoadModelSource("safetensors:" + path);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->family, "");
  EXPECT_EQ(s->config, "");
  const auto& t = s->manifest.tensors();
  ASSERT_EQ(t.size(), 4u);  // the tied head once, under the name the header lists first
  EXPECT_EQ(t[0].name, "model.embed_tokens.weight");
  EXPECT_EQ(t[0].shape, (std::vector<int64_t>{32, 8}));
  EXPECT_EQ(t[1].name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(t[2].name, "model.layers.0.input_layernorm.weight");
  EXPECT_EQ(t[3].name, "model.norm.weight");
  EXPECT_EQ(s->manifest.total_elements(), 32u * 8 + 64 + 8 + 8);
  EXPECT_EQ(s->tensors[0].dtype, "BF16");
  EXPECT_EQ(s->tensors[3].dtype, "F16");
}

TEST(ModelSourceTest, AnF32FileWrittenHereReadsAsItsOwnManifest) {
  TempDir dir;
  const std::vector<float> a(6), b(4);
  const std::vector<SafetensorsTensor> t = {{"a", {2, 3}, a}, {"b", {4}, b}};
  ASSERT_TRUE(WriteSafetensors(dir.Sub("f"), t, {}).ok());
  auto s = LoadModelSource("safetensors:" + dir.Sub("f"));
  ASSERT_TRUE(s.ok()) << s.status();
  auto want = Manifest::Create({{"a", {2, 3}}, {"b", {4}}});
  EXPECT_EQ(s->manifest.fingerprint(), want->fingerprint());
}

TEST(ModelSourceTest, SafetensorsRefusalsNameTheTensorAndTheCause) {
  TempDir dir;
  const auto refuse = [&](const std::string& header, size_t data) {
    WriteRaw(dir.Sub("bad"), header, data);
    return Error("safetensors:" + dir.Sub("bad"));
  };
  EXPECT_THAT(refuse(R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                         "x":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                     16),
              HasSubstr("tensor x is declared twice"));
  EXPECT_THAT(refuse(R"({"e":{"dtype":"F32","shape":[0,4],"data_offsets":[0,0]}})", 0),
              HasSubstr("tensor e is empty (shape [0,4])"));
  EXPECT_THAT(refuse(R"({"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})", 16),
              HasSubstr("tensor ids has dtype I64; only floating-point tensors"));
  EXPECT_THAT(refuse(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},
                         "b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
                     24),
              HasSubstr("tensor b (bytes [8,24)) overlaps tensor a (bytes [0,16))"));
  EXPECT_THAT(refuse(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8),
              HasSubstr("tensor a: data_offsets [0,16) lie outside the file's data section of 8"));
  EXPECT_THAT(refuse(R"({"a":{"dtype":"BF16","shape":[4],"data_offsets":[0,16]}})", 16),
              HasSubstr("tensor a: data_offsets [0,16) hold 16 bytes; shape [4] of BF16 is 8"));
  EXPECT_THAT(refuse(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},
                         "b":{"dtype":"F32","shape":[1,2],"data_offsets":[0,8]}})",
                     8),
              HasSubstr("tensors a and b share the bytes [0,8) but differ in shape"));
  EXPECT_THAT(refuse(R"({"big":{"dtype":"F32","shape":[1099511627776,1099511627776,
                         1099511627776],"data_offsets":[0,0]}})",
                     0),
              HasSubstr("tensor big: too large"));  // not a product wrapped round to 0
  EXPECT_THAT(refuse("{not json", 0), HasSubstr("malformed JSON header"));
  EXPECT_THAT(Error("safetensors:" + dir.Sub("absent")), HasSubstr("cannot open"));
}

// config.json plus model.safetensors, or plus an index over several files.
TEST(ModelSourceTest, HuggingFaceFolderOfOneFileOrShards) {
  TempDir dir;
  const std::filesystem::path one = dir.Sub("one"), sharded = dir.Sub("sharded");
  std::filesystem::create_directories(one);
  std::filesystem::create_directories(sharded);
  WriteText(one / "config.json", R"({"model_type":"llama"})");
  WriteRaw(one / "model.safetensors", LlamaHeader(), 688);
  auto a = LoadModelSource("hf:" + one.string());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->manifest.tensors().size(), 4u);

  // The same tensors over two files (the second file's name sorts last): the same manifest.
  WriteText(sharded / "config.json", R"({"model_type":"llama"})");
  WriteRaw(sharded / "model-00001-of-00002.safetensors",
           R"({"model.embed_tokens.weight":{"dtype":"BF16","shape":[32,8],"data_offsets":[0,512]},
    "lm_head.weight":{"dtype":"BF16","shape":[32,8],"data_offsets":[0,512]},
    "model.layers.0.self_attn.q_proj.weight":{"dtype":"BF16","shape":[8,8],"data_offsets":[512,640]}})",
           640);
  WriteRaw(
      sharded / "model-00002-of-00002.safetensors",
      R"({"model.layers.0.input_layernorm.weight":{"dtype":"F32","shape":[8],"data_offsets":[0,32]},
    "model.norm.weight":{"dtype":"F16","shape":[8],"data_offsets":[32,48]}})",
      48);
  const std::string index = R"({"metadata":{"total_size":688},"weight_map":{
    "lm_head.weight":"model-00001-of-00002.safetensors",
    "model.embed_tokens.weight":"model-00001-of-00002.safetensors",
    "model.layers.0.input_layernorm.weight":"model-00002-of-00002.safetensors",
    "model.layers.0.self_attn.q_proj.weight":"model-00001-of-00002.safetensors",
    "model.norm.weight":"model-00002-of-00002.safetensors"}})";
  WriteText(sharded / "model.safetensors.index.json", index);
  auto b = LoadModelSource("hf:" + sharded.string());
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->manifest.fingerprint(), a->manifest.fingerprint());

  // The index lists a tensor its file lacks.
  std::string lying = index;
  lying.replace(lying.find("\"model.norm.weight\""), 19, "\"model.gone.weight\"");
  WriteText(sharded / "model.safetensors.index.json", lying);
  EXPECT_THAT(Error("hf:" + sharded.string()),
              HasSubstr("model.safetensors.index.json does not list"));
  EXPECT_THAT(Error("hf:" + sharded.string()), HasSubstr("holds tensor model.norm.weight"));
}

TEST(ModelSourceTest, HuggingFaceFolderRefusals) {
  TempDir dir;
  const std::filesystem::path d = dir.Sub("m");
  std::filesystem::create_directories(d);
  WriteRaw(d / "model.safetensors", LlamaHeader(), 688);
  EXPECT_THAT(Error("hf:" + d.string()), HasSubstr("no config.json"));
  WriteText(d / "config.json", "{}");
  std::filesystem::remove(d / "model.safetensors");
  EXPECT_THAT(Error("hf:" + d.string()),
              HasSubstr("neither model.safetensors nor model.safetensors.index.json"));
  WriteText(d / "model.safetensors.index.json", R"({"weight_map":{"a":"../x.safetensors"}})");
  EXPECT_THAT(Error("hf:" + d.string()), HasSubstr("not a file of the folder"));
  EXPECT_THAT(Error("hf:" + dir.Sub("none")), HasSubstr("not a directory"));
}

TEST(ModelSourceTest, ManifestJsonFile) {
  TempDir dir;
  WriteText(dir.Sub("m.json"), R"({"format":"diloco-manifest","version":1,"tensors":[
      {"name":"embed.weight","shape":[32,8],"dtype":"BF16"},{"name":"norm.weight","shape":[8]}]})");
  auto s = LoadModelSource("manifest:" + dir.Sub("m.json"));
  ASSERT_TRUE(s.ok()) << s.status();
  auto want = Manifest::Create({{"embed.weight", {32, 8}}, {"norm.weight", {8}}});
  EXPECT_EQ(s->manifest.fingerprint(), want->fingerprint());
  EXPECT_EQ(s->tensors[0].dtype, "BF16");

  // Written back (what diloco-ctl manifest --out writes) and read again: the same model.
  ASSERT_TRUE(WriteManifestJson(dir.Sub("back.json"), s->tensors, s->manifest, s->spec).ok());
  auto back = LoadModelSource("manifest:" + dir.Sub("back.json"));
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->manifest.fingerprint(), s->manifest.fingerprint());
}

TEST(ModelSourceTest, ManifestJsonRefusals) {
  TempDir dir;
  const auto refuse = [&](const std::string& text) {
    WriteText(dir.Sub("bad.json"), text);
    return Error("manifest:" + dir.Sub("bad.json"));
  };
  const std::string head = R"({"format":"diloco-manifest","version":1,"tensors":)";
  EXPECT_THAT(refuse(head + "[{\"name\":\"a\",\"shape\":[2]}"), HasSubstr("malformed JSON"));
  EXPECT_THAT(refuse(R"({"format":"x","version":1,"tensors":[]})"),
              HasSubstr("\"format\" must be \"diloco-manifest\""));
  EXPECT_THAT(refuse(head + "[]}"), HasSubstr("\"tensors\" must be a non-empty array"));
  EXPECT_THAT(refuse(head + R"([{"name":"a","shape":[2]},{"name":"a","shape":[3]}]})"),
              HasSubstr("tensor a is declared twice"));
  EXPECT_THAT(refuse(head + R"([{"name":"a","shape":[2,0]}]})"),
              HasSubstr("tensor a is empty (shape [2,0])"));
  EXPECT_THAT(refuse(head + R"([{"name":"big","shape":[1099511627776,1099511627776,2]}]})"),
              HasSubstr("tensor big (shape [1099511627776,1099511627776,2]) is too large"));
  EXPECT_THAT(refuse(head + R"([{"name":"a","shape":[2],"dtype":"I32"}]})"),
              HasSubstr("tensor a has dtype I32"));
  EXPECT_THAT(refuse(head + R"([{"name":"a","shapes":[2]}]})"),
              HasSubstr("tensor a: unknown key \"shapes\""));
  EXPECT_THAT(refuse(head + R"([{"name":"a"}]})"), HasSubstr("tensor a has no \"shape\""));
  EXPECT_THAT(refuse(R"({"format":"diloco-manifest","version":1,"fingerprint":"0000000000000000",
                 "tensors":[{"name":"a","shape":[2]}]})"),
              HasSubstr("is not its tensors'"));
  EXPECT_THAT(Error("manifest:" + dir.Sub("absent.json")), HasSubstr("cannot open manifest file"));
}

TEST(ModelSourceTest, GptPresetsAndSpecsAreTheGptManifest) {
  for (const std::string spec : {"tiny", "small", "gpt2-124m", "L=2,H=2,C=8,T=4,V=16"}) {
    auto s = LoadModelSource(spec);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(s->family, "gpt");
    EXPECT_EQ(s->config, GptConfigString(*ParseGptConfig(spec)));
    EXPECT_EQ(s->manifest.fingerprint(), GptManifest(*ParseGptConfig(spec))->fingerprint());
  }
  EXPECT_EQ(LoadModelSource("tiny")->config, "L=2,H=4,C=64,T=64,V=256");
  // A GPT preset's manifest is what it has always been: existing stores keep their identity.
  EXPECT_EQ(LoadModelSource("tiny")->manifest.fingerprint(),
            LoadModelSource("L=2,H=4,C=64,T=64,V=256")->manifest.fingerprint());
  ASSERT_NE(FindModelFamily("gpt"), nullptr);
  EXPECT_EQ(FindModelFamily("gpt")->name(), "gpt");
  EXPECT_EQ(FindModelFamily("nope"), nullptr);
  EXPECT_THAT(Error("bogus"), HasSubstr("model spec 'bogus'"));
  EXPECT_THAT(Error("bogus"), HasSubstr("manifest:PATH"));
  EXPECT_THAT(Error("manifest:"), HasSubstr("no path after manifest:"));
}

}  // namespace
}  // namespace diloco
