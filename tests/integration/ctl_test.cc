// diloco-ctl end to end: live stats from a running shard, synthetic data generation, and the
// evaluation of a model (a safetensors file, a worker's --save_model, the shards' stores) on a
// whole .bin file, its first N tokens, or the workers' own held-out set: the figures say how
// many tokens they are over and agree with the worker's and with each other; bad input gives a
// clear error. Any model in and out: diloco-worker --init_from of a file or Hugging Face folder
// (any float dtype) and diloco-ctl export of the stores give the model back under its own names,
// bit for bit, with its config.json; bad files and folders are refused, naming the cause. A store
// whose write-ahead log lost committed checkpoints fails `show` and the server's start, until
// the rollback is accepted.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/safetensors.h"
#include "tests/integration/cluster.h"
#include "tests/integration/shell.h"
#include "tests/storage/test_util.h"
#include "worker/data/token_file.h"
#include "worker/model/gpt.h"
#include "worker/model/gpt/gpt_config.h"
#include "worker/model/gpt/gpt_hf.h"
#include "worker/model/safetensors.h"

namespace diloco::testing {
namespace {

// "loss X over N tokens" from diloco-ctl eval's output (the first such line).
struct Loss {
  double loss = NAN;
  long long tokens = -1;
};
Loss ParseLoss(const std::string& out) {
  Loss l;
  const auto at = out.find("loss ");
  if (at != std::string::npos)
    std::sscanf(out.c_str() + at, "loss %lf over %lld tokens", &l.loss, &l.tokens);
  return l;
}

// A tiny model with random weights (LayerNorm gains 1), written as safetensors.
std::vector<float> RandomTinyModel(const std::string& path, uint32_t seed) {
  auto manifest = GptManifest(*ParseGptConfig("tiny"));
  std::vector<float> params(manifest->total_elements());
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 0.02f);
  for (auto& p : params) p = n(rng);
  for (const auto& t : manifest->tensors())
    if (t.name.find("ln") != std::string::npos && t.name.ends_with(".weight"))
      std::fill_n(params.begin() + t.offset, t.numel(), 1.0f);
  EXPECT_TRUE(model::WriteSafetensors(path, *manifest, params).ok());
  return params;
}

TEST(CtlTest, StatsOfARunningShard) {
  const auto dir = TestDir();
  Process shard(
      {ServerBinary(), "--bind=tcp://127.0.0.1:*", "--port_file=" + (dir / "port").string(),
       "--model=tiny", "--fragments=4", "--progress_interval=1000s"},
      (dir / "shard.log").string());
  auto ep = WaitForLine(dir / "port", absl::Seconds(20));
  ASSERT_TRUE(ep.has_value());
  auto [rc, out] = Shell(absl::StrCat(DILOCO_CTL_BINARY, " stats --server=", *ep));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_EQ(JsonNumber(out, "rounds"), std::optional<double>(0)) << out;
  EXPECT_EQ(JsonNumber(out, "versions.0"), std::optional<double>(0)) << out;
  shard.Signal(SIGTERM);
  EXPECT_EQ(shard.Wait(absl::Seconds(10)), std::optional<int>(0));
  // A shard that is not there: a clear error, not a hang.
  auto [rc2, out2] =
      Shell(absl::StrCat(DILOCO_CTL_BINARY, " stats --server=", *ep, " --timeout_ms=300"));
  EXPECT_EQ(rc2, 1);
  EXPECT_NE(out2.find("no answer"), std::string::npos) << out2;
}

TEST(CtlTest, GenDataThenEvaluateAModel) {
  const auto dir = TestDir();
  const std::string bin = (dir / "data.bin").string();
  auto [rc, out] = Shell(absl::StrCat(DILOCO_CTL_BINARY, " gen-data --tokens=20000 --out=", bin));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("entropy rate"), std::string::npos) << out;

  // A freshly initialised tiny model: its loss is near ln(256) = 5.55 nats.
  auto cfg = ParseGptConfig("tiny");
  auto manifest = GptManifest(*cfg);
  std::vector<float> params(manifest->total_elements());
  std::mt19937 rng(3);
  std::normal_distribution<float> n(0.0f, 0.02f);
  for (auto& p : params) p = n(rng);
  for (const auto& t : manifest->tensors())
    if (t.name.find("ln") != std::string::npos && t.name.ends_with(".weight"))
      std::fill_n(params.begin() + t.offset, t.numel(), 1.0f);
  const std::string model = (dir / "model.safetensors").string();
  ASSERT_TRUE(model::WriteSafetensors(model, *manifest, params).ok());
  auto [rc2, out2] = Shell(
      absl::StrCat(DILOCO_CTL_BINARY, " eval --model=tiny --params=", model, " --data=", bin));
  ASSERT_EQ(rc2, 0) << out2;
  const Loss whole = ParseLoss(out2);
  EXPECT_NEAR(whole.loss, std::log(256.0), 0.3) << out2;
  EXPECT_EQ(whole.tokens, 19999) << out2;  // every token of the file but the first is predicted

  // The wrong model for the file: refused with a message, not a crash.
  auto [rc3, out3] = Shell(
      absl::StrCat(DILOCO_CTL_BINARY, " eval --model=small --params=", model, " --data=", bin));
  EXPECT_EQ(rc3, 1) << out3;
  EXPECT_NE(out3.find("diloco-ctl:"), std::string::npos) << out3;
}

// The whole file, every token, whatever the batch: checked against the model run here on the
// same windows (3 whole windows of the context and a last one of 10 tokens); --tokens=N takes
// the first N predicted tokens; more than the file has is refused.
TEST(CtlTest, EvalCoversTheWholeFileOrTheFirstNTokens) {
  const auto dir = TestDir();
  const std::string model_path = (dir / "model.safetensors").string();
  const std::vector<float> params = RandomTinyModel(model_path, 5);
  const GptConfig cfg = *ParseGptConfig("tiny");
  const int T = cfg.context, n = 3 * T + 10;  // predicted tokens
  std::vector<uint16_t> toks(n + 1);
  std::mt19937 rng(1);
  for (auto& t : toks) t = static_cast<uint16_t>(rng() % 256);
  const std::string bin = (dir / "d.bin").string();
  ASSERT_TRUE(data::WriteTokenFile(bin, toks).ok());
  auto window_sum = [&](int start, int len) {
    auto g = model::Gpt<float>::Create(cfg, 1, len);
    std::copy(params.begin(), params.end(), (*g)->params().begin());
    std::vector<int32_t> in(toks.begin() + start, toks.begin() + start + len),
        tg(toks.begin() + start + 1, toks.begin() + start + len + 1);
    return (*g)->Forward(in.data(), tg.data()) * len;
  };
  const double expected =
      (window_sum(0, T) + window_sum(T, T) + window_sum(2 * T, T) + window_sum(3 * T, 10)) / n;
  for (const char* batch : {"", " --batch=1", " --batch=2"}) {
    auto [rc, out] = Shell(absl::StrCat(
        DILOCO_CTL_BINARY, " eval --model=tiny --params=", model_path, " --data=", bin, batch));
    ASSERT_EQ(rc, 0) << out;
    const Loss l = ParseLoss(out);
    EXPECT_EQ(l.tokens, n) << out;
    EXPECT_NEAR(l.loss, expected, 1e-5) << batch << ": " << out;
  }
  auto [rc, out] = Shell(absl::StrCat(DILOCO_CTL_BINARY, " eval --model=tiny --params=", model_path,
                                      " --data=", bin, " --tokens=", T + 5));
  ASSERT_EQ(rc, 0) << out;
  const Loss first = ParseLoss(out);
  EXPECT_EQ(first.tokens, T + 5) << out;
  EXPECT_NEAR(first.loss, (window_sum(0, T) + window_sum(T, 5)) / (T + 5), 1e-5) << out;
  auto [rc2, out2] =
      Shell(absl::StrCat(DILOCO_CTL_BINARY, " eval --model=tiny --params=", model_path,
                         " --data=", bin, " --tokens=", n + 1));
  EXPECT_EQ(rc2, 1) << out2;
  EXPECT_NE(out2.find("asked for"), std::string::npos) << out2;
  auto [rc3, out3] =
      Shell(absl::StrCat(DILOCO_CTL_BINARY, " eval --model=tiny --params=", model_path,
                         " --data=synthetic --tokens=5"));
  EXPECT_EQ(rc3, 2) << out3;
}

// A worker without servers trains 5 steps and saves its model: diloco-ctl eval --data=synthetic
// on that file gives the worker's own final figure, on the same number of tokens, with the same
// floor; the held-out stream gen-data --heldout writes is the one the worker evaluates.
TEST(CtlTest, SyntheticEvalOfASavedModelIsTheWorkersOwnFigure) {
  const auto dir = TestDir();
  const std::string saved = (dir / "local.safetensors").string();
  const auto jsonl = dir / "worker.jsonl";
  Process w({WorkerBinary(), "--model=tiny", "--steps=5", "--lr=0.01", "--threads=1",
             "--save_model=" + saved, "--metrics_jsonl=" + jsonl.string()},
            (dir / "worker.log").string());
  ASSERT_EQ(w.Wait(absl::Seconds(60)), std::optional<int>(0));
  const auto done = ReadEvents(jsonl, "done");
  ASSERT_EQ(done.size(), 1u);
  ASSERT_TRUE(done[0].count("eval_local") && done[0].count("heldout_tokens") &&
              done[0].count("entropy_floor"));
  std::ifstream log(dir / "worker.log");
  const std::string text(std::istreambuf_iterator<char>(log), {});
  EXPECT_NE(text.find("on 2048 tokens (entropy floor"), std::string::npos) << text;

  auto [rc, out] = Shell(
      absl::StrCat(DILOCO_CTL_BINARY, " eval --model=tiny --params=", saved, " --data=synthetic"));
  ASSERT_EQ(rc, 0) << out;
  const Loss l = ParseLoss(out);
  EXPECT_NEAR(l.loss, done[0].at("eval_local"), 1e-4) << out;
  EXPECT_EQ(l.tokens, done[0].at("heldout_tokens")) << out;
  EXPECT_EQ(l.tokens, 4 * 8 * 64);  // the worker's defaults: eval_batches 4, batch 8, context
  double floor = 0;
  const auto at = out.find("entropy floor ");
  ASSERT_NE(at, std::string::npos) << out;
  ASSERT_EQ(std::sscanf(out.c_str() + at, "entropy floor %lf", &floor), 1);
  EXPECT_NEAR(floor, done[0].at("entropy_floor"), 1e-5);
  // Every chain's share, as printed: the same count each.
  for (int k = 0; k < 4; ++k) {
    const auto c = out.find(absl::StrCat("chain ", k, ": "));
    ASSERT_NE(c, std::string::npos) << out;
    EXPECT_EQ(ParseLoss(out.substr(c)).tokens, 512) << out;
  }

  // --eval_batches resizes the set like the worker's flag.
  auto [rc2, out2] = Shell(absl::StrCat(DILOCO_CTL_BINARY, " eval --model=tiny --params=", saved,
                                        " --data=synthetic --eval_batches=16"));
  ASSERT_EQ(rc2, 0) << out2;
  EXPECT_EQ(ParseLoss(out2).tokens, 16 * 8 * 64) << out2;

  // The held-out stream as a file: evaluated whole, every one of its tokens.
  const std::string heldout = (dir / "heldout.bin").string();
  auto [rc3, out3] = Shell(absl::StrCat(DILOCO_CTL_BINARY, " gen-data --heldout --out=", heldout));
  ASSERT_EQ(rc3, 0) << out3;
  auto toks = data::ReadTokenFile(heldout, 256);
  ASSERT_TRUE(toks.ok()) << toks.status();
  EXPECT_EQ(toks->size(), size_t{260} * 1024 + 1);
  auto [rc4, out4] = Shell(absl::StrCat(DILOCO_CTL_BINARY, " eval --model=tiny --params=", saved,
                                        " --data=", heldout, " --tokens=20000"));
  ASSERT_EQ(rc4, 0) << out4;
  EXPECT_EQ(ParseLoss(out4).tokens, 20000) << out4;
  EXPECT_LT(ParseLoss(out4).loss, 6.0) << out4;
  EXPECT_EQ(Shell(absl::StrCat(DILOCO_CTL_BINARY, " gen-data --heldout --tokens=5 --out=", heldout))
                .first,
            2);
}

// The global model evaluated straight from the shards' stores equals the evaluation of their
// export, on a file and on the synthetic held-out set.
TEST(CtlTest, EvalOfStoresEqualsEvalOfTheirExport) {
  LocalShards s;
  s.dir = TestDir();
  s.StartShards(2, {"--durability=per-round"});
  Process w({WorkerBinary(), "--model=tiny", "--fragments=4", "--steps=30", "--inner_steps=5",
             "--lr=0.01", "--threads=1", "--codec=fp32",
             "--servers=" + s.endpoints[0] + "," + s.endpoints[1]},
            (s.dir / "worker.log").string());
  ASSERT_EQ(w.Wait(absl::Seconds(60)), std::optional<int>(0));
  for (auto& p : s.shards) {
    p->Signal(SIGTERM);
    ASSERT_EQ(p->Wait(absl::Seconds(20)), std::optional<int>(0));
  }
  const std::string stores =
      absl::StrCat((s.dir / "store0").string(), " ", (s.dir / "store1").string());
  const std::string exported = (s.dir / "global.safetensors").string();
  auto [rc, out] = Shell(
      absl::StrCat(DILOCO_CTL_BINARY,
                   " export --model=tiny --fragments=4 --shards=2 --out=", exported, " ", stores));
  ASSERT_EQ(rc, 0) << out;
  const std::string bin = (s.dir / "d.bin").string();
  ASSERT_EQ(Shell(absl::StrCat(DILOCO_CTL_BINARY, " gen-data --tokens=5000 --out=", bin)).first, 0);
  for (const std::string& data : {bin, std::string("synthetic")}) {
    auto [rc1, from_file] = Shell(absl::StrCat(
        DILOCO_CTL_BINARY, " eval --model=tiny --params=", exported, " --data=", data));
    ASSERT_EQ(rc1, 0) << from_file;
    auto [rc2, from_stores] = Shell(
        absl::StrCat(DILOCO_CTL_BINARY, " eval --model=tiny --fragments=4 --shards=2 --data=", data,
                     " ", stores));
    ASSERT_EQ(rc2, 0) << from_stores;
    const Loss a = ParseLoss(from_file), b = ParseLoss(from_stores);
    EXPECT_EQ(a.loss, b.loss) << from_file << from_stores;  // the same parameters, bit for bit
    EXPECT_EQ(a.tokens, b.tokens);
    EXPECT_GT(a.tokens, 0);
    EXPECT_NE(from_stores.find("fragment versions"), std::string::npos) << from_stores;
  }
  // A store set that is not the plan's: refused with the reason.
  auto [rc3, out3] = Shell(absl::StrCat(DILOCO_CTL_BINARY,
                                        " eval --model=tiny --fragments=4 --shards=2 --data=", bin,
                                        " ", (s.dir / "store0").string()));
  EXPECT_EQ(rc3, 1) << out3;
  EXPECT_NE(out3.find("no store given for shard"), std::string::npos) << out3;
}

// export --format=hf writes what Hugging Face's GPT2LMHeadModel loads: config.json with the
// model's dimensions, model.safetensors with "transformer." names, Conv1D matrices transposed
// to [in, out] (the square attn.c_proj too, which would otherwise load silently wrong), no
// lm_head (tied) and the "pt" format tag. A loader that follows transformers' GPT-2 rules
// strictly (tests/integration/hf_gpt2_loader.py, /usr/bin/python3 with torch) scores the same
// loss on the same tokens as diloco-ctl eval of the project's own export.
TEST(CtlTest, HfExportLoadsAsGpt2WithTheSameLoss) {
  LocalShards s;
  s.dir = TestDir();
  s.StartShards(1, {"--durability=per-round"});
  // Lockstep: the same rounds whatever the machine's load, so the export has learned.
  Process w(
      {WorkerBinary(), "--model=tiny", "--fragments=4", "--steps=60", "--inner_steps=5",
       "--lr=0.01", "--threads=1", "--codec=fp32", "--lockstep", "--servers=" + s.endpoints[0]},
      (s.dir / "worker.log").string());
  ASSERT_EQ(w.Wait(absl::Seconds(60)), std::optional<int>(0));
  s.shards[0]->Signal(SIGTERM);
  ASSERT_EQ(s.shards[0]->Wait(absl::Seconds(20)), std::optional<int>(0));
  const std::string store = (s.dir / "store0").string();
  const std::string own = (s.dir / "own.safetensors").string(), hf = (s.dir / "hf").string();
  const std::string args = " --model=tiny --fragments=4 --shards=1 --out=";
  auto [rc1, out1] = Shell(absl::StrCat(DILOCO_CTL_BINARY, " export", args, own, " ", store));
  ASSERT_EQ(rc1, 0) << out1;
  auto [rc2, out2] =
      Shell(absl::StrCat(DILOCO_CTL_BINARY, " export --format=hf", args, hf, " ", store));
  ASSERT_EQ(rc2, 0) << out2;

  // The layout, read back.
  auto own_file = ReadSafetensors(own);
  auto hf_file = ReadSafetensors(hf + "/model.safetensors");
  ASSERT_TRUE(own_file.ok() && hf_file.ok()) << own_file.status() << hf_file.status();
  EXPECT_EQ(hf_file->metadata["format"], "pt");
  ASSERT_EQ(hf_file->tensors.size(), own_file->tensors.size());
  for (size_t i = 0; i < own_file->tensors.size(); ++i) {
    const LoadedTensor &a = own_file->tensors[i], &b = hf_file->tensors[i];
    EXPECT_EQ(b.name, "transformer." + a.name);
    const bool conv1d = a.name.starts_with("h.") && a.shape.size() == 2;
    if (!conv1d) {
      EXPECT_EQ(b.shape, a.shape) << a.name;
      EXPECT_EQ(b.data, a.data) << a.name;
      continue;
    }
    ASSERT_EQ(b.shape, (std::vector<int64_t>{a.shape[1], a.shape[0]})) << a.name;
    const int64_t rows = a.shape[0], cols = a.shape[1];
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        ASSERT_EQ(b.data[c * rows + r], a.data[r * cols + c]) << a.name << " " << r << "," << c;
  }
  std::ifstream config(hf + "/config.json");
  const Json json = Json::parse(config, nullptr, /*allow_exceptions=*/false);
  ASSERT_TRUE(json.is_object()) << "config.json is not a JSON object";
  for (const auto& [field, value] :
       std::map<std::string, Json>{{"n_layer", 2},
                                   {"n_head", 4},
                                   {"n_embd", 64},
                                   {"n_positions", 64},
                                   {"vocab_size", 256},
                                   {"tie_word_embeddings", true},
                                   {"activation_function", "gelu_new"}})
    EXPECT_EQ(json.value(field, Json()), value) << field << " in " << json;

  // The same loss through a GPT-2 loader that knows nothing of this project.
  const std::string bin = (s.dir / "d.bin").string();
  ASSERT_EQ(Shell(absl::StrCat(DILOCO_CTL_BINARY, " gen-data --tokens=3000 --out=", bin)).first, 0);
  auto [rc3, ours] =
      Shell(absl::StrCat(DILOCO_CTL_BINARY, " eval --model=tiny --params=", own, " --data=", bin));
  ASSERT_EQ(rc3, 0) << ours;
  auto [rc4, theirs] = Shell(absl::StrCat("/usr/bin/python3 ", DILOCO_SOURCE_DIR,
                                          "/tests/integration/hf_gpt2_loader.py ", hf, " ", bin));
  if (rc4 == 77) GTEST_SKIP() << "no torch for /usr/bin/python3: " << theirs;
  ASSERT_EQ(rc4, 0) << theirs;
  const Loss a = ParseLoss(ours), b = ParseLoss(theirs);
  EXPECT_EQ(a.tokens, b.tokens) << ours << theirs;
  EXPECT_NEAR(a.loss, b.loss, 1e-4) << ours << theirs;
  EXPECT_LT(a.loss, 5.45) << "trained: below ln 256 = 5.55";

  // A directory that cannot be made is an error naming it, and nothing is written.
  auto [rc5, out5] = Shell(
      absl::StrCat(DILOCO_CTL_BINARY, " export --format=hf", args, own, "/under_a_file ", store));
  EXPECT_EQ(rc5, 1) << out5;
  EXPECT_NE(out5.find("under_a_file"), std::string::npos) << out5;
  auto [rc6, out6] =
      Shell(absl::StrCat(DILOCO_CTL_BINARY, " export --format=onnx", args, hf, " ", store));
  EXPECT_EQ(rc6, 2) << out6;
  EXPECT_NE(out6.find("Illegal value 'onnx' specified for flag 'format'"), std::string::npos)
      << out6;
}

// diloco-worker --init_from: a file in Hugging Face's layout becomes theta(0) of an empty fleet,
// bit for bit (exported back in the project's layout); a second worker with another file joins
// the fleet's model and says so; files with a wrong tensor (name, shape, dtype, a stray or a
// missing one, a Conv1D matrix not transposed) are refused naming it.
TEST(CtlTest, InitFromAFileSeedsAnEmptyFleetOnly) {
  const std::filesystem::path dir = TestDir();
  const std::string own = (dir / "own.safetensors").string(),
                    hf = (dir / "hf.safetensors").string();
  const std::vector<float> params = RandomTinyModel(own, 7);
  auto manifest = GptManifest(*ParseGptConfig("tiny"));
  std::vector<std::vector<float>> scratch;
  ASSERT_TRUE(
      WriteSafetensors(hf, HfTensors(*manifest, params, &scratch), {{"format", "pt"}}).ok());
  const std::string other = (dir / "other.safetensors").string();
  RandomTinyModel(other, 8);

  LocalShards s;
  s.dir = dir;
  s.StartShards(1, {"--durability=per-round"});
  auto worker = [&](const std::string& init, int id) {
    Process w({WorkerBinary(), "--model=tiny", "--fragments=4", "--steps=1", "--inner_steps=100",
               "--threads=1", "--worker_id=" + std::to_string(id), "--init_from=" + init,
               "--servers=" + s.endpoints[0]},
              (dir / absl::StrCat("worker", id, ".log")).string());
    EXPECT_EQ(w.Wait(absl::Seconds(60)), std::optional<int>(0));
    std::ifstream log(dir / absl::StrCat("worker", id, ".log"));
    return std::string((std::istreambuf_iterator<char>(log)), {});
  };
  const std::string first = worker(hf, 0);
  EXPECT_EQ(first.find("warning"), std::string::npos) << first;
  const std::string second = worker(other, 1);
  EXPECT_NE(second.find("the fleet already had theta(0)"), std::string::npos) << second;
  s.shards[0]->Signal(SIGTERM);
  ASSERT_EQ(s.shards[0]->Wait(absl::Seconds(20)), std::optional<int>(0));
  const std::string exported = (dir / "global.safetensors").string();
  auto [rc, out] = Shell(absl::StrCat(
      DILOCO_CTL_BINARY, " export --model=tiny --fragments=4 --shards=1 --out=", exported, " ",
      (dir / "store0").string()));
  ASSERT_EQ(rc, 0) << out;
  auto global = model::ReadSafetensorsParams(exported, *manifest);
  ASSERT_TRUE(global.ok()) << global.status();
  EXPECT_EQ(*global, params) << "theta(0) is the file's, bit for bit";

  // Refused before any connection, naming the tensor.
  struct Bad {
    std::string name;
    std::vector<SafetensorsTensor> tensors;
    std::string says;
  };
  std::vector<Bad> bad;
  auto own_tensors = [&] {
    std::vector<SafetensorsTensor> t;
    for (const TensorSpec& spec : manifest->tensors())
      t.push_back({spec.name, spec.shape,
                   std::span<const float>(params).subspan(spec.offset, spec.numel())});
    return t;
  };
  bad.push_back({"extra", own_tensors(), "stray.weight"});
  bad.back().tensors.push_back({"stray.weight", {1}, std::span<const float>(params).first(1)});
  bad.push_back({"missing", own_tensors(), "no tensor ln_f.bias"});
  bad.back().tensors.pop_back();
  bad.push_back({"shape", own_tensors(), "wpe.weight has shape [32,128]"});
  bad.back().tensors[1].shape = {32, 128};
  bad.push_back({"hf-unturned", HfTensors(*manifest, params, &scratch), "Conv1D"});
  for (SafetensorsTensor& t : bad.back().tensors)
    if (t.name == "transformer.h.0.mlp.c_fc.weight") t.shape = {t.shape[1], t.shape[0]};
  // A bf16 file (written by hand: the project writes F32 only): its values are read, widened,
  // and the file is refused for the tensors it lacks.
  {
    const std::string header = R"({"wte.weight":{"dtype":"BF16","shape":[256,64],)"
                               R"("data_offsets":[0,32768]}})";
    const uint64_t n = header.size();
    std::ofstream f(dir / "bf16.safetensors", std::ios::binary);
    f.write(reinterpret_cast<const char*>(&n), sizeof(n));
    f << header << std::string(32768, '\0');
  }
  auto [bf16_code, bf16_text] = Shell(absl::StrCat(
      WorkerBinary(), " --model=tiny --steps=1 --init_from=", (dir / "bf16.safetensors").string()));
  EXPECT_EQ(bf16_code, 2) << bf16_text;
  EXPECT_NE(bf16_text.find("bf16.safetensors: no tensor wpe.weight"), std::string::npos)
      << bf16_text;
  for (const Bad& b : bad) {
    const std::string path = (dir / (b.name + ".safetensors")).string();
    ASSERT_TRUE(WriteSafetensors(path, b.tensors, {}).ok()) << b.name;
    auto [code, text] =
        Shell(absl::StrCat(WorkerBinary(), " --model=tiny --steps=1 --init_from=", path));
    EXPECT_EQ(code, 2) << b.name << ": " << text;
    EXPECT_NE(text.find(b.says), std::string::npos) << b.name << ": " << text;
  }
}

// --init_from reads any floating-point dtype as fp32, exactly (F64 rounded to nearest): normal,
// subnormal, signed zero, the largest finite value, infinities and NaN of each format.
TEST(CtlTest, InitFromWidensEveryFloatDtypeExactly) {
  const auto widen = [](const std::string& dtype, const auto& values) {
    std::vector<float> out(values.size(), -7.0f);
    EXPECT_TRUE(model::WidenToF32(dtype, reinterpret_cast<const char*>(values.data()),
                                  values.size(), out.data()))
        << dtype;
    return out;
  };
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(widen("F16", std::vector<uint16_t>{0x3c00, 0xc000, 0x0001, 0x7bff, 0x8000, 0x7c00}),
            (std::vector<float>{1.0f, -2.0f, std::ldexp(1.0f, -24), 65504.0f, -0.0f, inf}));
  EXPECT_TRUE(std::signbit(widen("F16", std::vector<uint16_t>{0x8000})[0]));
  EXPECT_TRUE(std::isnan(widen("F16", std::vector<uint16_t>{0x7e00})[0]));
  EXPECT_EQ(widen("BF16", std::vector<uint16_t>{0x3f80, 0xc049, 0x0001}),
            (std::vector<float>{1.0f, -3.140625f, std::bit_cast<float>(0x00010000u)}));
  EXPECT_EQ(widen("F8_E4M3", std::vector<uint8_t>{0x38, 0xb8, 0x7e, 0x01, 0x08}),
            (std::vector<float>{1.0f, -1.0f, 448.0f, std::ldexp(1.0f, -9), std::ldexp(1.0f, -6)}));
  EXPECT_TRUE(std::isnan(widen("F8_E4M3", std::vector<uint8_t>{0x7f})[0]));
  EXPECT_EQ(widen("F8_E5M2", std::vector<uint8_t>{0x3c, 0x7b, 0x01, 0xfc}),
            (std::vector<float>{1.0f, 57344.0f, std::ldexp(1.0f, -16), -inf}));
  EXPECT_EQ(widen("F64", std::vector<double>{0.1, -1e300}), (std::vector<float>{0.1f, -inf}));
  EXPECT_EQ(widen("F32", std::vector<float>{1.5f, -0.25f}), (std::vector<float>{1.5f, -0.25f}));
  float out = 0;
  const int32_t one = 1;
  EXPECT_FALSE(model::WidenToF32("I32", reinterpret_cast<const char*>(&one), 1, &out));
}

// A safetensors file written by hand: each tensor's dtype and raw bytes, in the order given
// (their data order); each tie (alias, kept) adds the alias over the kept tensor's bytes.
struct RawTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  std::string bytes;
};
void WriteRawSafetensors(const std::filesystem::path& path, const std::vector<RawTensor>& tensors,
                         const std::vector<std::pair<std::string, std::string>>& ties = {}) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::string data;
  for (const RawTensor& t : tensors) {
    header[t.name] = {{"dtype", t.dtype},
                      {"shape", t.shape},
                      {"data_offsets", {data.size(), data.size() + t.bytes.size()}}};
    data += t.bytes;
  }
  for (const auto& [alias, kept] : ties) header[alias] = header[kept];
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  const uint64_t n = h.size();
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(&n), sizeof(n));
  f << h << data;
}

std::string Slurp(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A Llama-shaped model (GQA attention, SwiGLU MLP, RMSNorm gains) whose head is tied to the
// embedding as a tool may save it: lm_head.weight over the embedding's bytes. Random values.
struct SmallLlama {
  std::vector<RawTensor> f32;                         // in data order
  std::vector<RawTensor> bf16;                        // the same values rounded to BF16 (truncated)
  std::map<std::string, std::vector<float>> widened;  // bf16's values as fp32
};
SmallLlama MakeSmallLlama(uint32_t seed) {
  const std::vector<std::pair<std::string, std::vector<int64_t>>> shapes = {
      {"model.embed_tokens.weight", {32, 8}},
      {"model.layers.0.self_attn.q_proj.weight", {8, 8}},
      {"model.layers.0.self_attn.k_proj.weight", {4, 8}},
      {"model.layers.0.self_attn.v_proj.weight", {4, 8}},
      {"model.layers.0.self_attn.o_proj.weight", {8, 8}},
      {"model.layers.0.mlp.gate_proj.weight", {12, 8}},
      {"model.layers.0.mlp.up_proj.weight", {12, 8}},
      {"model.layers.0.mlp.down_proj.weight", {8, 12}},
      {"model.layers.0.input_layernorm.weight", {8}},
      {"model.norm.weight", {8}}};
  SmallLlama m;
  std::mt19937 rng(seed);
  std::normal_distribution<float> n(0.0f, 0.5f);
  for (const auto& [name, shape] : shapes) {
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    std::vector<float> v(numel);
    for (float& x : v) x = n(rng);
    std::vector<uint16_t> b(numel);
    std::vector<float>& w = m.widened[name];
    for (int64_t i = 0; i < numel; ++i) {
      b[i] = static_cast<uint16_t>(std::bit_cast<uint32_t>(v[i]) >> 16);
      w.push_back(std::bit_cast<float>(uint32_t{b[i]} << 16));
    }
    m.f32.push_back(
        {name, "F32", shape, std::string(reinterpret_cast<char*>(v.data()), 4 * numel)});
    m.bf16.push_back(
        {name, "BF16", shape, std::string(reinterpret_cast<char*>(b.data()), 2 * numel)});
  }
  return m;
}

// Any model in and out (--model=hf:DIR, no GPT): diloco-worker --init_from uploads a file or a
// Hugging Face folder of the model (any float dtype, a sharded index) as theta(0), and
// diloco-ctl export gives it back under its own names, the tie as the source has it, F32, bit
// for bit (a BF16 start widened exactly), with the source's config.json and
// generation_config.json (--format=hf). Files that do not fit the fleet's model, folders without
// config.json or weights, headers that lie are refused naming the cause before any connection
// (the fleet's theta(0) is the next good file's); exports that cannot be right write nothing.
TEST(CtlTest, AnyModelInitFromThenExportGivesTheModelBack) {
  namespace fs = std::filesystem;
  const fs::path dir = TestDir();
  const SmallLlama model = MakeSmallLlama(11);
  const fs::path src = dir / "src";
  fs::create_directories(src);
  const std::string config = "{\"model_type\": \"llama\", \"tie_word_embeddings\": true}\n";
  const std::string generation = "{\"bos_token_id\": 1}\n";
  std::ofstream(src / "config.json") << config;
  std::ofstream(src / "generation_config.json") << generation;
  const std::vector<std::pair<std::string, std::string>> tie = {
      {"lm_head.weight", "model.embed_tokens.weight"}};
  WriteRawSafetensors(src / "model.safetensors", model.f32, tie);
  // The same model in BF16, sharded over two files by an index, the head saved once (tied).
  const fs::path bf16 = dir / "bf16";
  fs::create_directories(bf16);
  std::ofstream(bf16 / "config.json") << config;
  const std::vector<RawTensor> first(model.bf16.begin(), model.bf16.begin() + 4),
      second(model.bf16.begin() + 4, model.bf16.end());
  WriteRawSafetensors(bf16 / "model-00001-of-00002.safetensors", first);
  WriteRawSafetensors(bf16 / "model-00002-of-00002.safetensors", second);
  nlohmann::json index = {{"metadata", nlohmann::json::object()}, {"weight_map", {}}};
  for (size_t i = 0; i < model.bf16.size(); ++i)
    index["weight_map"][model.bf16[i].name] =
        i < first.size() ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  std::ofstream(bf16 / "model.safetensors.index.json") << index.dump();

  LocalShards s;
  s.dir = dir;
  s.model = "hf:" + src.string();
  s.StartShards(2, {"--durability=per-round"});
  const std::string servers = s.endpoints[0] + "," + s.endpoints[1];
  const std::string worker =
      absl::StrCat(WorkerBinary(), " --device=synthetic --model=", s.model,
                   " --fragments=4 --steps=1 --inner_steps=1000 --synthetic_step_time=1ms");
  const auto init = [&](const fs::path& from, int id) {
    return Shell(absl::StrCat(worker, " --worker_id=", id, " --servers=", servers,
                              " --init_from=", from.string()));
  };

  // Refused before any connection, naming the cause: exit 2, the fleet still without theta(0).
  struct Bad {
    std::string name, says;
    std::vector<RawTensor> tensors;
  };
  std::vector<Bad> bad;
  bad.push_back({"shape", "model.layers.0.self_attn.k_proj.weight has shape [8,4]", model.f32});
  bad.back().tensors[2].shape = {8, 4};
  bad.push_back({"missing", "no tensor model.norm.weight", model.f32});
  bad.back().tensors.pop_back();
  bad.push_back({"extra", "tensor model.layers.0.attn.bias is not a parameter", model.f32});
  bad.back().tensors.push_back({"model.layers.0.attn.bias", "F32", {1}, std::string(4, '\0')});
  bad.push_back({"renamed", "model.layers.0.mlp.w1.weight is not a parameter", model.f32});
  bad.back().tensors[5].name = "model.layers.0.mlp.w1.weight";
  bad.push_back({"lying", "lie outside the file's data section", model.f32});
  for (const Bad& b : bad) {
    const fs::path path = dir / (b.name + ".safetensors");
    WriteRawSafetensors(path, b.tensors);
    if (b.name == "lying")  // the header's last range, 32 bytes, now ends past the file
      fs::resize_file(path, fs::file_size(path) - 16);
    auto [code, text] = init(path, 5);
    EXPECT_EQ(code, 2) << b.name << ": " << text;
    EXPECT_NE(text.find(b.says), std::string::npos) << b.name << ": " << text;
    EXPECT_NE(text.find(path.string()), std::string::npos) << b.name << ": " << text;
  }
  const fs::path no_config = dir / "no_config", no_weights = dir / "no_weights";
  fs::create_directories(no_config);
  fs::copy_file(src / "model.safetensors", no_config / "model.safetensors");
  fs::create_directories(no_weights);
  std::ofstream(no_weights / "config.json") << config;
  const std::pair<fs::path, std::string> bad_folders[] = {
      {no_config, "no config.json"},
      {no_weights, "neither model.safetensors nor model.safetensors.index.json"}};
  for (const auto& [folder, says] : bad_folders) {
    auto [code, text] = init(folder, 5);
    EXPECT_EQ(code, 2) << text;
    EXPECT_NE(text.find(says), std::string::npos) << text;
  }

  // The F32 file seeds the fleet; the BF16 folder, later, joins the fleet's model and says so.
  auto [rc0, out0] = init(src / "model.safetensors", 0);
  ASSERT_EQ(rc0, 0) << out0;
  EXPECT_EQ(out0.find("warning"), std::string::npos) << out0;
  auto [rc1, out1] = init(bf16, 1);
  ASSERT_EQ(rc1, 0) << out1;
  EXPECT_NE(out1.find("the fleet already had theta(0)"), std::string::npos) << out1;
  for (auto& p : s.shards) {
    p->Signal(SIGTERM);
    ASSERT_EQ(p->Wait(absl::Seconds(20)), std::optional<int>(0));
  }
  const std::string stores =
      absl::StrCat((dir / "store0").string(), " ", (dir / "store1").string());
  const std::string plan = absl::StrCat(" --model=", s.model, " --fragments=4 --shards=2");
  const fs::path out = dir / "export";
  auto [rc2, text2] = Shell(absl::StrCat(DILOCO_CTL_BINARY, " export --format=hf", plan,
                                         " --out=", out.string(), " ", stores));
  ASSERT_EQ(rc2, 0) << text2;
  // The source's bytes: the same header entries (names, shapes, the tie), the same data.
  const std::string exported = Slurp(out / "model.safetensors"),
                    source = Slurp(src / "model.safetensors");
  uint64_t n_out = 0, n_src = 0;
  ASSERT_GT(exported.size(), 8u);
  std::memcpy(&n_out, exported.data(), 8);
  std::memcpy(&n_src, source.data(), 8);
  EXPECT_EQ(exported.substr(8 + n_out), source.substr(8 + n_src)) << "the values, bit for bit";
  nlohmann::json header = nlohmann::json::parse(exported.substr(8, n_out));  // keys unordered
  EXPECT_EQ(header["__metadata__"]["format"], "pt");
  header.erase("__metadata__");
  EXPECT_EQ(header, nlohmann::json::parse(source.substr(8, n_src)));
  EXPECT_EQ(Slurp(out / "config.json"), config);
  EXPECT_EQ(Slurp(out / "generation_config.json"), generation);
  // The export is a source of the very model the stores serve.
  auto [rc3, text3] = Shell(
      absl::StrCat(DILOCO_CTL_BINARY, " manifest --model=hf:", out.string(), " --diff=", s.model));
  EXPECT_EQ(rc3, 0) << text3;

  // Refused, writing nothing: --format=hf without a config.json to carry (exit 2), into the
  // source folder, into a folder holding a sharded index, from a source without config.json.
  const fs::path manifest = dir / "m.json";
  ASSERT_EQ(Shell(absl::StrCat(DILOCO_CTL_BINARY, " manifest --model=", s.model,
                               " --out=", manifest.string()))
                .first,
            0);
  auto [rc4, text4] = Shell(
      absl::StrCat(DILOCO_CTL_BINARY, " export --format=hf --model=manifest:", manifest.string(),
                   " --fragments=4 --shards=2 --out=", (dir / "m_hf").string(), " ", stores));
  EXPECT_EQ(rc4, 2) << text4;
  EXPECT_NE(text4.find("config.json"), std::string::npos) << text4;
  EXPECT_FALSE(fs::exists(dir / "m_hf"));
  auto [rc5, text5] = Shell(absl::StrCat(DILOCO_CTL_BINARY, " export --format=hf", plan,
                                         " --out=", src.string(), " ", stores));
  EXPECT_EQ(rc5, 1) << text5;
  EXPECT_NE(text5.find("is the source folder"), std::string::npos) << text5;
  EXPECT_EQ(Slurp(src / "model.safetensors"), source);
  const fs::path stale = dir / "stale";
  fs::create_directories(stale);
  std::ofstream(stale / "model.safetensors.index.json") << index.dump();
  auto [rc6, text6] = Shell(absl::StrCat(DILOCO_CTL_BINARY, " export --format=hf", plan,
                                         " --out=", stale.string(), " ", stores));
  EXPECT_EQ(rc6, 1) << text6;
  EXPECT_NE(text6.find("model.safetensors.index.json"), std::string::npos) << text6;
  EXPECT_FALSE(fs::exists(stale / "model.safetensors"));
  const fs::path other = dir / "other";  // a folder of another model (one tensor's shape)
  fs::create_directories(other);
  std::ofstream(other / "config.json") << config;
  fs::copy_file(dir / "shape.safetensors", other / "model.safetensors");
  auto [rc10, text10] = Shell(
      absl::StrCat(DILOCO_CTL_BINARY, " export --format=hf --model=hf:", other.string(),
                   " --fragments=4 --shards=2 --out=", (dir / "wrong").string(), " ", stores));
  EXPECT_EQ(rc10, 1) << text10;
  EXPECT_NE(text10.find("belongs to plan"), std::string::npos) << text10;
  EXPECT_FALSE(fs::exists(dir / "wrong"));
  fs::remove(src / "config.json");
  auto [rc7, text7] = Shell(absl::StrCat(DILOCO_CTL_BINARY, " export --format=hf", plan,
                                         " --out=", (dir / "late").string(), " ", stores));
  EXPECT_EQ(rc7, 1) << text7;
  EXPECT_NE(text7.find("no config.json"), std::string::npos) << text7;
  EXPECT_FALSE(fs::exists(dir / "late"));
  std::ofstream(src / "config.json") << config;

  // A fleet started from the BF16 folder: theta(0) is its values widened exactly, exported in
  // one file under the source's names.
  LocalShards b;
  b.dir = dir / "from_bf16";
  fs::create_directories(b.dir);
  b.model = s.model;
  b.StartShards(1, {"--durability=per-round"});
  auto [rc8, text8] = Shell(absl::StrCat(worker, " --shards=1 --servers=", b.endpoints[0],
                                         " --init_from=", bf16.string()));
  ASSERT_EQ(rc8, 0) << text8;
  b.shards[0]->Signal(SIGTERM);
  ASSERT_EQ(b.shards[0]->Wait(absl::Seconds(20)), std::optional<int>(0));
  const fs::path file = dir / "from_bf16.safetensors";
  auto [rc9, text9] = Shell(absl::StrCat(DILOCO_CTL_BINARY, " export --model=", s.model,
                                         " --fragments=4 --shards=1 --out=", file.string(), " ",
                                         (b.dir / "store0").string()));
  ASSERT_EQ(rc9, 0) << text9;
  auto read = ReadSafetensors(file.string());
  ASSERT_TRUE(read.ok()) << read.status();
  // In data order: each tensor of the model, the tied head over the embedding's bytes.
  std::vector<std::string> names;
  for (const RawTensor& t : model.bf16) names.push_back(t.name);
  names.insert(names.begin() + 1, "lm_head.weight");
  ASSERT_EQ(read->tensors.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    const LoadedTensor& t = read->tensors[i];
    EXPECT_EQ(t.name, names[i]);
    const std::string& of = i == 1 ? names[0] : t.name;
    EXPECT_EQ(t.data, model.widened.at(of)) << t.name << ": BF16 widened, bit for bit";
  }
}

TEST(CtlTest, AStoreThatLostCheckpointsFailsShowAndTheStartUntilAccepted) {
  LocalShards s;
  s.dir = TestDir();
  s.StartShards(1, {"--durability=per-round"});
  Process w({WorkerBinary(), "--model=tiny", "--fragments=4", "--steps=40", "--inner_steps=5",
             "--threads=1", "--servers=" + s.endpoints[0]},
            (s.dir / "worker.log").string());
  ASSERT_EQ(w.Wait(absl::Seconds(60)), std::optional<int>(0));
  s.shards[0]->Signal(SIGTERM);
  ASSERT_EQ(s.shards[0]->Wait(absl::Seconds(20)), std::optional<int>(0));
  const std::filesystem::path store = s.dir / "store0";
  const std::string show = absl::StrCat(DILOCO_CTL_BINARY, " show --store=", store.string());
  auto [rc0, out0] = Shell(show);
  ASSERT_EQ(rc0, 0) << out0;

  // Every per-round checkpoint of the run is in the write-ahead log (no flush at this size):
  // cut it in half, as a full disk's copy or a careless operator might.
  std::vector<std::filesystem::path> logs;
  for (const auto& e : std::filesystem::directory_iterator(store))
    if (e.path().extension() == ".log") logs.push_back(e.path());
  ASSERT_EQ(logs.size(), 1u);
  std::filesystem::resize_file(logs[0], std::filesystem::file_size(logs[0]) / 2);
  const auto before = storage::testutil::DirectoryContents(store);

  auto [rc1, out1] = Shell(show);
  EXPECT_EQ(rc1, 1) << out1;
  EXPECT_NE(out1.find("are lost"), std::string::npos) << out1;
  auto refused = s.StartShard(0, 1, "tcp://127.0.0.1:*");
  EXPECT_EQ(refused->Wait(absl::Seconds(20)), std::optional<int>(2));
  const std::string log = storage::testutil::ReadAll(s.dir / "shard0.log");
  EXPECT_NE(log.find("are lost"), std::string::npos) << log;
  EXPECT_NE(log.find("--accept_store_rollback"), std::string::npos) << log;
  EXPECT_TRUE(storage::testutil::DirectoryContents(store) == before)
      << "the refused start changed the store";

  // Accepted, but half the log is gone: the newest manifest recovered names tensor files that
  // retention (3 checkpoints kept) has removed, so there is nothing to roll back to.
  auto unloadable = s.StartShard(0, 1, "tcp://127.0.0.1:*", {"--accept_store_rollback"});
  EXPECT_EQ(unloadable->Wait(absl::Seconds(20)), std::optional<int>(2));
  const std::string log2 = storage::testutil::ReadAll(s.dir / "shard0.log");
  EXPECT_NE(log2.find("does not load either"), std::string::npos) << log2;

  // The log deleted outright (nothing was ever flushed at this size): the records are all
  // gone, the tensor files say the store was not fresh. Accepted, the shard starts anew, says
  // so, and reports it.
  std::filesystem::remove(logs[0]);
  auto [rc3, out3] = Shell(show);
  EXPECT_EQ(rc3, 1) << out3;
  EXPECT_NE(out3.find("RocksDB holds none of the store's records"), std::string::npos) << out3;
  s.shards[0] = s.StartShard(0, 1, "tcp://127.0.0.1:*", {"--accept_store_rollback"});
  auto ep = WaitForLine(s.dir / "port0", absl::Seconds(20));
  ASSERT_TRUE(ep.has_value());
  s.endpoints[0] = *ep;
  auto stats = ShardStats(*ep, absl::Seconds(10));
  ASSERT_TRUE(stats.has_value());
  EXPECT_NE(stats->find("\"store_rollback\":true"), std::string::npos) << *stats;
  s.shards[0]->Signal(SIGTERM);
  ASSERT_EQ(s.shards[0]->Wait(absl::Seconds(20)), std::optional<int>(0));
  const std::string accepted = storage::testutil::ReadAll(s.dir / "shard0.log");
  EXPECT_NE(accepted.find("WARNING: --accept_store_rollback"), std::string::npos) << accepted;
  // The store is sound again: the checkpoints since the restart are all it names.
  auto [rc2, out2] = Shell(show);
  EXPECT_EQ(rc2, 0) << out2;
}

}  // namespace
}  // namespace diloco::testing
