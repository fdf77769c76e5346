// The C++ Llama against PyTorch 1.13 on the same weights (tests/model/llama_torch_check.py, the
// reference python/examples/llama.py): llama-tiny's loss and every gradient. The weights travel
// as the family's Hugging Face export (the registry's "llama" WriteHf), which the reference
// loads strictly and `--model=hf:DIR` reads back as llama-tiny's very manifest. Also: the fp32
// model (what the trainer runs) agrees with the fp64 one.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/model_family.h"
#include "common/model_source.h"
#include "common/safetensors.h"
#include "gtest/gtest.h"
#include "worker/model/llama/llama_config.h"
#include "worker/model/llama/llama_model.h"

namespace diloco::model {
namespace {

std::filesystem::path TempDir() {
  std::string t = (std::filesystem::temp_directory_path() / "llama_torch_XXXXXX").string();
  return mkdtemp(t.data());
}

std::pair<int, std::string> RunShell(const std::string& cmd) {
  std::string out;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

TEST(LlamaTorchTest, LossAndEveryGradientMatchPyTorchOnTheSameWeights) {
  const LlamaConfig c = *ParseLlamaConfig("llama-tiny");
  const int B = 2, T = 16;
  auto m64 = LlamaModel<double>::Create(c, B, T);
  auto m32 = LlamaModel<float>::Create(c, B, T);
  ASSERT_TRUE(m64.ok() && m32.ok());
  const Manifest& manifest = (*m64)->manifest();
  std::vector<float> w(manifest.total_elements());
  InitLlama(manifest, 7, w);
  std::mt19937_64 rng(3);
  std::normal_distribution<float> noise(0.0f, 0.2f);
  for (const TensorSpec& t : manifest.tensors())  // norm weights away from 1
    if (t.shape.size() == 1)
      for (uint64_t i = 0; i < t.numel(); ++i) w[t.offset + i] += noise(rng);
  std::copy(w.begin(), w.end(), (*m64)->params().begin());
  std::copy(w.begin(), w.end(), (*m32)->params().begin());
  std::vector<int32_t> in(B * T), tg(B * T);
  for (size_t i = 0; i < in.size(); ++i) {
    in[i] = int32_t(rng() % c.vocab);
    tg[i] = int32_t(rng() % c.vocab);
  }
  const double loss = (*m64)->Forward(in.data(), tg.data());
  (*m64)->Backward();
  const double loss32 = (*m32)->Forward(in.data(), tg.data());
  (*m32)->Backward();
  EXPECT_NEAR(loss32, loss, 1e-4 * loss);
  for (const TensorSpec& t : manifest.tensors()) {
    double big = 0, err = 0;
    for (uint64_t i = 0; i < t.numel(); ++i) {
      big = std::max(big, std::abs((*m64)->grads()[t.offset + i]));
      err = std::max(err, std::abs((*m64)->grads()[t.offset + i] - (*m32)->grads()[t.offset + i]));
    }
    EXPECT_LT(err, 1e-3 * big) << t.name;
  }

  const std::filesystem::path dir = TempDir();
  const ModelFamily* family = FindModelFamily("llama");
  ASSERT_NE(family, nullptr);
  ASSERT_TRUE(family
                  ->WriteHf(dir.string(), LlamaConfigString(c), manifest, w,
                            ModelFileMetadata(LlamaConfigString(c), manifest))
                  .ok());
  // The export is llama-tiny's manifest for --model=hf:DIR, and its tensors come back whole.
  auto from_hf = LoadModelSource("hf:" + dir.string());
  ASSERT_TRUE(from_hf.ok()) << from_hf.status();
  EXPECT_EQ(from_hf->manifest.fingerprint(), LoadModelSource("llama-tiny")->manifest.fingerprint());
  auto file = ReadSafetensors((dir / "model.safetensors").string());
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata["diloco.model"], "llama:L=2,H=4,KV=2,C=64,F=172,T=64,V=256");
  auto flat = family->FlatFromHf(*file, manifest, "model.safetensors");
  ASSERT_TRUE(flat.ok()) << flat.status();
  EXPECT_EQ(*flat, w);

  std::vector<float> g((*m64)->grads().begin(), (*m64)->grads().end());
  std::vector<SafetensorsTensor> gt;
  for (const TensorSpec& t : manifest.tensors())
    gt.push_back({t.name, t.shape, std::span<const float>(g).subspan(t.offset, t.numel())});
  ASSERT_TRUE(WriteSafetensors((dir / "grads.safetensors").string(), gt, {}).ok());
  std::ofstream(dir / "tokens.json") << absl::StrCat(
      "{\"B\":", B, ",\"T\":", T, ",\"inputs\":[", absl::StrJoin(in, ","), "],\"targets\":[",
      absl::StrJoin(tg, ","), "],\"loss\":", absl::StrFormat("%.17g", loss), "}");
  auto [rc, out] = RunShell(absl::StrCat("/usr/bin/python3 ", DILOCO_SOURCE_DIR,
                                         "/tests/model/llama_torch_check.py ", dir.string()));
  std::filesystem::remove_all(dir);
  if (rc == 77) GTEST_SKIP() << out;
  EXPECT_EQ(rc, 0) << out;
  std::printf("%s", out.c_str());
}

}  // namespace
}  // namespace diloco::model
