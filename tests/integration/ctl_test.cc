// diloco-ctl end to end: live stats from a running shard, synthetic data generation, and the
// evaluation of a safetensors model on a .bin file; bad input gives a clear error.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>

#include "absl/strings/str_cat.h"
#include "common/model_spec.h"
#include "tests/integration/cluster.h"
#include "worker/model/safetensors.h"

namespace diloco::testing {
namespace {

// Runs a command, returns (exit status, stdout+stderr).
std::pair<int, std::string> Shell(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen((cmd + " 2>&1").c_str(), "r");
  char buf[4096];
  while (p && std::fgets(buf, sizeof(buf), p)) out += buf;
  const int st = p ? ::pclose(p) : -1;
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out};
}

TEST(CtlTest, StatsOfARunningShard) {
  const auto dir = TestDir();
  Process shard(
      {ServerBinary(), "--bind=tcp://127.0.0.1:*", "--port_file=" + (dir / "port").string(),
       "--model=tiny", "--fragments=2", "--progress_interval=1000s"},
      (dir / "shard.log").string());
  auto ep = WaitForLine(dir / "port", absl::Seconds(20));
  ASSERT_TRUE(ep.has_value());
  auto [rc, out] = Shell(absl::StrCat(DILOCO_CTL_BINARY, " stats --server=", *ep));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("\"rounds\":0"), std::string::npos) << out;
  EXPECT_NE(out.find("\"versions\":{\"0\":0"), std::string::npos) << out;
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
  double loss = 0;
  const auto at = out2.find("loss ");
  ASSERT_NE(at, std::string::npos) << out2;
  ASSERT_EQ(std::sscanf(out2.c_str() + at, "loss %lf", &loss), 1) << out2;
  EXPECT_NEAR(loss, std::log(256.0), 0.3);

  // The wrong model for the file: refused with a message, not a crash.
  auto [rc3, out3] = Shell(
      absl::StrCat(DILOCO_CTL_BINARY, " eval --model=small --params=", model, " --data=", bin));
  EXPECT_EQ(rc3, 1) << out3;
  EXPECT_NE(out3.find("diloco-ctl:"), std::string::npos) << out3;
}

}  // namespace
}  // namespace diloco::testing
