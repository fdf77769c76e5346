// Any model on the fleet, end to end (common/model_source.h): `diloco-ctl manifest` writes the
// manifest of a Hugging Face folder or a GPT preset and reads back to the same fingerprint, and
// `--diff` names the first differing tensor; a shard serving a Llama-shaped model from a
// manifest file (no GPT anywhere) takes the pushes of two synthetic workers of that model, and
// refuses a third whose model differs in one tensor, the worker naming that tensor; the GPT
// trainer and `diloco-ctl eval` refuse a model they cannot run, saying so.
#include "common/model_source.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "common/safetensors.h"
#include "tests/integration/cluster.h"
#include "tests/integration/shell.h"

namespace diloco::testing {
namespace {

std::string Slurp(const std::filesystem::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void WriteText(const std::filesystem::path& path, const std::string& text) {
  std::ofstream(path) << text;
}

// A one-layer Llama-like model (GQA attention, SwiGLU MLP, RMSNorm gains, untied head), as a
// manifest file; `up_rows` sizes one MLP matrix so that two models differ in that tensor only.
std::string LlamaManifest(int up_rows) {
  return absl::StrReplaceAll(
      R"({"format": "diloco-manifest", "version": 1, "tensors": [
  {"name": "model.embed_tokens.weight", "shape": [256, 64], "dtype": "BF16"},
  {"name": "model.layers.0.self_attn.q_proj.weight", "shape": [64, 64]},
  {"name": "model.layers.0.self_attn.k_proj.weight", "shape": [16, 64]},
  {"name": "model.layers.0.self_attn.v_proj.weight", "shape": [16, 64]},
  {"name": "model.layers.0.self_attn.o_proj.weight", "shape": [64, 64]},
  {"name": "model.layers.0.mlp.gate_proj.weight", "shape": [172, 64]},
  {"name": "model.layers.0.mlp.up_proj.weight", "shape": [UP, 64]},
  {"name": "model.layers.0.mlp.down_proj.weight", "shape": [64, 172]},
  {"name": "model.layers.0.input_layernorm.weight", "shape": [64]},
  {"name": "model.layers.0.post_attention_layernorm.weight", "shape": [64]},
  {"name": "model.norm.weight", "shape": [64]},
  {"name": "lm_head.weight", "shape": [256, 64]}]})",
      {{"UP", absl::StrCat(up_rows)}});
}

// A Hugging Face folder: config.json and a BF16 model.safetensors whose head is tied to the
// embedding (two names over the same bytes).
void WriteHfFolder(const std::filesystem::path& dir) {
  std::filesystem::create_directories(dir);
  WriteText(dir / "config.json", R"({"model_type": "llama", "tie_word_embeddings": true})");
  const std::string header =
      R"({"model.embed_tokens.weight":{"dtype":"BF16","shape":[64,16],"data_offsets":[0,2048]},)"
      R"("lm_head.weight":{"dtype":"BF16","shape":[64,16],"data_offsets":[0,2048]},)"
      R"("model.norm.weight":{"dtype":"BF16","shape":[16],"data_offsets":[2048,2080]}})";
  std::ofstream out(dir / "model.safetensors", std::ios::binary);
  const uint64_t n = header.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out << header << std::string(2080, '\0');
}

uint64_t Fingerprint(const std::string& spec) {
  auto s = LoadModelSource(spec);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? s->manifest.fingerprint() : 0;
}

TEST(ModelSourceTest, CtlManifestRoundTripAndDiff) {
  const auto dir = TestDir();
  WriteHfFolder(dir / "hf");
  const std::string hf = "hf:" + (dir / "hf").string();
  const std::string out = (dir / "hf.json").string();
  auto [rc, text] =
      Shell(absl::StrCat(DILOCO_CTL_BINARY, " manifest --model=", hf, " --out=", out));
  ASSERT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("2 tensors, 1040 parameters"), std::string::npos) << text;  // tied: once
  EXPECT_NE(Slurp(out).find("\"dtype\":\"BF16\""), std::string::npos) << Slurp(out);
  EXPECT_EQ(Fingerprint("manifest:" + out), Fingerprint(hf));

  // A GPT preset's manifest reads back to the preset's fingerprint: one fleet, either spelling.
  const std::string tiny = (dir / "tiny.json").string();
  std::tie(rc, text) =
      Shell(absl::StrCat(DILOCO_CTL_BINARY, " manifest --model=tiny --out=", tiny));
  ASSERT_EQ(rc, 0) << text;
  EXPECT_EQ(Fingerprint("manifest:" + tiny), Fingerprint("tiny"));

  std::tie(rc, text) =
      Shell(absl::StrCat(DILOCO_CTL_BINARY, " manifest --model=manifest:", tiny, " --diff=tiny"));
  EXPECT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("same tensors"), std::string::npos) << text;
  std::tie(rc, text) = Shell(
      absl::StrCat(DILOCO_CTL_BINARY, " manifest --model=L=2,H=4,C=64,T=32,V=256 --diff=tiny"));
  EXPECT_EQ(rc, 1) << text;
  EXPECT_NE(text.find("first difference: tensor 1: wpe.weight [64,64] in --diff=tiny, "
                      "wpe.weight [32,64] in --model=L=2,H=4,C=64,T=32,V=256"),
            std::string::npos)
      << text;
  std::tie(rc, text) =
      Shell(absl::StrCat(DILOCO_CTL_BINARY, " manifest --model=hf:", (dir / "nowhere").string()));
  EXPECT_EQ(rc, 2) << text;
  EXPECT_NE(text.find("not a directory"), std::string::npos) << text;
}

TEST(ModelSourceTest, SyntheticWorkersTrainALlamaShapedModelAndAnotherModelIsNamed) {
  LocalShards s;
  s.dir = TestDir();
  WriteText(s.dir / "llama.json", LlamaManifest(172));
  WriteText(s.dir / "other.json", LlamaManifest(128));
  s.model = "manifest:" + (s.dir / "llama.json").string();
  s.StartShards(1);
  const auto worker = [&](int id, const std::string& manifest) {
    return std::vector<std::string>{WorkerBinary(),
                                    absl::StrCat("--worker_id=", id),
                                    "--fragments=4",
                                    "--model=manifest:" + (s.dir / manifest).string(),
                                    "--device=synthetic",
                                    "--synthetic_step_time=10ms",
                                    "--inner_steps=5",
                                    "--steps=50",
                                    "--join_timeout=20s",
                                    "--progress_interval=1000s",
                                    "--servers=" + s.endpoints[0]};
  };
  Process w0(worker(0, "llama.json"), (s.dir / "w0.log").string());
  Process w1(worker(1, "llama.json"), (s.dir / "w1.log").string());
  EXPECT_EQ(w0.Wait(absl::Seconds(60)), std::optional<int>(0)) << Slurp(s.dir / "w0.log");
  EXPECT_EQ(w1.Wait(absl::Seconds(60)), std::optional<int>(0)) << Slurp(s.dir / "w1.log");
  EXPECT_GT(s.Stat(0, "rounds"), 0);
  EXPECT_GT(s.Stat(0, "pushes.queued"), 10);
  EXPECT_EQ(s.Stat(0, "params"), 256 * 64 * 2 + 64 * 64 * 2 + 16 * 64 * 2 + 172 * 64 * 3 + 64 * 3);

  // One tensor differs: the shard refuses the worker and the worker names that tensor.
  Process bad(worker(2, "other.json"), (s.dir / "bad.log").string());
  EXPECT_EQ(bad.Wait(absl::Seconds(30)), std::optional<int>(2));
  const std::string log = Slurp(s.dir / "bad.log");
  EXPECT_NE(log.find("first difference: tensor 6: model.layers.0.mlp.up_proj.weight [128,64] in "
                     "this learner's model, model.layers.0.mlp.up_proj.weight [172,64] in the "
                     "shard's model"),
            std::string::npos)
      << log;
}

// The number after `key` in `text` (NaN when absent).
double NumberAfter(const std::string& text, const std::string& key) {
  const size_t at = text.find(key);
  return at == std::string::npos ? NAN : std::strtod(text.c_str() + at + key.size(), nullptr);
}

// --model=llama-tiny: the Llama family's CPU trainer behind diloco-worker (its canonical config
// in the model line and in the saved file's diloco.model), the saved model scored by diloco-ctl
// eval as the worker scored it (the family-neutral evaluator), and --device=cuda refused by name.
TEST(ModelSourceTest, TheWorkerTrainsTheLlamaFamilyOnTheCpuAndRefusesCuda) {
  const auto dir = TestDir();
  const std::string saved = (dir / "llama.safetensors").string();
  auto [rc, text] = Shell(absl::StrCat(WorkerBinary(),
                                       " --model=llama-tiny --device=cpu --steps=20 --batch=2 "
                                       "--save_model=",
                                       saved));
  EXPECT_EQ(rc, 0) << text;
  EXPECT_NE(text.find("model llama:L=2,H=4,KV=2,C=64,F=172,T=64,V=256 (123712 params)"),
            std::string::npos)
      << text;
  auto file = ReadSafetensors(saved);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata["diloco.model"], "llama:L=2,H=4,KV=2,C=64,F=172,T=64,V=256");
  EXPECT_EQ(file->tensors.front().name, "model.embed_tokens.weight");
  EXPECT_EQ(file->tensors.back().name, "lm_head.weight");
  const double worker_loss = NumberAfter(text, " -> ");
  auto [eval_rc, eval] =
      Shell(absl::StrCat(DILOCO_CTL_BINARY, " eval --model=llama-tiny --params=", saved,
                         " --data=synthetic --batch=2"));
  EXPECT_EQ(eval_rc, 0) << eval;
  EXPECT_NE(eval.find("over 512 tokens"), std::string::npos) << eval;
  EXPECT_NEAR(NumberAfter(eval, ": loss "), worker_loss, 1e-4) << text << eval;
  std::tie(rc, text) =
      Shell(absl::StrCat(WorkerBinary(), " --model=llama-tiny --device=cuda --steps=1"));
  EXPECT_EQ(rc, 2) << text;
  EXPECT_NE(text.find("--device=cuda: the llama family has no CUDA kernels yet"), std::string::npos)
      << text;
}

// A fleet of the Llama family: a shard and a C++ worker on llama-tiny, then diloco-ctl export
// --format=hf through the family's adapter: a Hugging Face Llama folder (config.json of
// LlamaForCausalLM) that --model=hf:DIR reads as llama-tiny's manifest, holding the same values
// as the plain export, and that python/examples/llama.py loads strictly (when torch is there).
TEST(ModelSourceTest, ALlamaFleetExportsAHuggingFaceLlamaFolder) {
  LocalShards s;
  s.dir = TestDir();
  s.model = "llama-tiny";
  s.StartShards(1, {"--durability=per-round"});
  Process w(
      {WorkerBinary(), "--model=llama-tiny", "--fragments=4", "--steps=20", "--inner_steps=5",
       "--batch=2", "--threads=1", "--codec=fp32", "--lockstep", "--servers=" + s.endpoints[0]},
      (s.dir / "worker.log").string());
  ASSERT_EQ(w.Wait(absl::Seconds(90)), std::optional<int>(0)) << Slurp(s.dir / "worker.log");
  s.shards[0]->Signal(SIGTERM);
  ASSERT_EQ(s.shards[0]->Wait(absl::Seconds(20)), std::optional<int>(0));
  const std::string store = (s.dir / "store0").string();
  const std::string own = (s.dir / "own.safetensors").string(), hf = (s.dir / "hf").string();
  const std::string args = " --model=llama-tiny --fragments=4 --shards=1 --out=";
  auto [rc, out] = Shell(absl::StrCat(DILOCO_CTL_BINARY, " export", args, own, " ", store));
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) =
      Shell(absl::StrCat(DILOCO_CTL_BINARY, " export --format=hf", args, hf, " ", store));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(Slurp(std::filesystem::path(hf) / "config.json").find("\"LlamaForCausalLM\""),
            std::string::npos);
  auto source = LoadModelSource("hf:" + hf);
  ASSERT_TRUE(source.ok()) << source.status();
  EXPECT_EQ(source->manifest.fingerprint(), LoadModelSource("llama-tiny")->manifest.fingerprint());
  auto a = ReadSafetensors(own), b = ReadSafetensors(hf + "/model.safetensors");
  ASSERT_TRUE(a.ok() && b.ok());
  ASSERT_EQ(a->tensors.size(), b->tensors.size());
  for (size_t i = 0; i < a->tensors.size(); ++i) {
    EXPECT_EQ(a->tensors[i].name, b->tensors[i].name);
    EXPECT_EQ(a->tensors[i].data, b->tensors[i].data) << a->tensors[i].name;
  }
  EXPECT_EQ(b->metadata["diloco.model"], "llama:L=2,H=4,KV=2,C=64,F=172,T=64,V=256");
  std::tie(rc, out) = Shell(absl::StrCat(
      "/usr/bin/python3 -c \"import sys; sys.path.insert(0, '", DILOCO_SOURCE_DIR,
      "/python/examples'); import llama; llama.load_hf_folder('", hf, "'); print('loaded')\""));
  if (out.find("No module named 'torch'") == std::string::npos) {
    EXPECT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("loaded"), std::string::npos) << out;
  }
}

TEST(ModelSourceTest, TheTrainerAndEvalRefuseADeclaredModel) {
  const auto dir = TestDir();
  WriteText(dir / "llama.json", LlamaManifest(172));
  const std::string model = "--model=manifest:" + (dir / "llama.json").string();
  auto [rc, text] = Shell(absl::StrCat(WorkerBinary(), " ", model, " --steps=1"));
  EXPECT_EQ(rc, 2) << text;
  EXPECT_NE(text.find("--device=cpu trains the C++ trainer's model families only"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("--device=synthetic"), std::string::npos) << text;
  std::tie(rc, text) =
      Shell(absl::StrCat(DILOCO_CTL_BINARY, " eval ", model, " --params=x --data=synthetic"));
  EXPECT_EQ(rc, 1) << text;
  EXPECT_NE(text.find("eval needs a model of a family the C++ trainer runs"), std::string::npos)
      << text;
}

}  // namespace
}  // namespace diloco::testing
