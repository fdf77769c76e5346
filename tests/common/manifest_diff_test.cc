// Naming the tensor that keeps a learner out: FirstDifference between two manifests, the
// shard's refusal text (ModelRefusal) parsed back, and what a refused learner adds to it when
// it can read the shard's --model. And the GPT presets' fingerprints, pinned: the stores and
// fleets of before must keep their identity whatever else --model learns to read.
#include "common/manifest_diff.h"

#include <fstream>

#include "absl/strings/str_format.h"
#include "common/model_refusal.h"
#include "common/model_source.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/storage/test_util.h"

namespace diloco {
namespace {

using storage::testutil::TempDir;
using ::testing::HasSubstr;

Manifest Make(std::vector<TensorSpec> t) { return *Manifest::Create(std::move(t)); }

TEST(ManifestDiffTest, FirstDifferingTensorByPositionNameAndShape) {
  const Manifest a = Make({{"embed", {32, 8}}, {"q", {8, 8}}, {"norm", {8}}});
  EXPECT_EQ(FirstDifference(a, "A", a, "B"), std::nullopt);
  EXPECT_EQ(FirstDifference(a, "A", Make({{"embed", {32, 8}}, {"q", {8, 16}}, {"norm", {8}}}), "B"),
            "tensor 1: q [8,8] in A, q [8,16] in B");
  EXPECT_EQ(FirstDifference(a, "A", Make({{"embed", {32, 8}}, {"k", {8, 8}}, {"norm", {8}}}), "B"),
            "tensor 1: q [8,8] in A, k [8,8] in B");
  EXPECT_EQ(FirstDifference(a, "A", Make({{"embed", {32, 8}}, {"q", {8, 8}}}), "B"),
            "tensor 2: norm [8] in A; B ends after 2 tensors");
  EXPECT_EQ(FirstDifference(Make({{"embed", {32, 8}}}), "A", a, "B"),
            "tensor 1: q [8,8] in B; A ends after 1 tensors");
}

TEST(ManifestDiffTest, RefusalTextNamesTheShardsModelAndParsesBack) {
  const std::string text = ModelRefusal(0x1234, 0xabcdef0123456789, "manifest:/m/llama.json");
  EXPECT_THAT(text, HasSubstr("this shard serves model abcdef0123456789"));
  EXPECT_THAT(text, HasSubstr("diloco-ctl manifest --diff=manifest:/m/llama.json --model="));
  // As a worker reports it: the shard's text after its own words.
  auto r = ParseModelRefusal("shard 0 (tcp://127.0.0.1:5) refuses this worker: " + text);
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->shard_fingerprint, 0xabcdef0123456789u);
  EXPECT_EQ(r->shard_spec, "manifest:/m/llama.json");
  auto bare = ParseModelRefusal(ModelRefusal(1, 2, ""));
  ASSERT_TRUE(bare.has_value());
  EXPECT_EQ(bare->shard_fingerprint, 2u);
  EXPECT_EQ(bare->shard_spec, "");
  EXPECT_EQ(ParseModelRefusal("plan 1, this shard serves plan 2"), std::nullopt);
}

TEST(ManifestDiffTest, ARefusedLearnerNamesTheTensorWhenItReadsTheShardsModel) {
  TempDir dir;
  std::ofstream(dir.Sub("shard.json"))
      << R"({"format":"diloco-manifest","version":1,"tensors":[{"name":"embed","shape":[32,8]},
            {"name":"q","shape":[8,8]}]})";
  const std::string spec = "manifest:" + dir.Sub("shard.json");
  const Manifest shards = LoadModelSource(spec)->manifest;
  const Manifest mine = Make({{"embed", {32, 8}}, {"q", {8, 16}}});
  EXPECT_EQ(ExplainModelRefusal(ModelRefusal(mine.fingerprint(), shards.fingerprint(), spec), mine,
                                "manifest:mine.json"),
            "first difference: tensor 1: q [8,16] in this learner's model, q [8,8] in the shard's "
            "model");
  // The shard's file reads differently here (another fingerprint), or not at all: the way by hand.
  EXPECT_THAT(ExplainModelRefusal(ModelRefusal(mine.fingerprint(), 77, spec), mine, "m"),
              HasSubstr("reads differently here; diloco-ctl manifest --diff=" + spec));
  EXPECT_THAT(ExplainModelRefusal(ModelRefusal(1, 2, "manifest:/nonexistent.json"), mine, "m"),
              HasSubstr("is not readable here"));
  EXPECT_EQ(ExplainModelRefusal("some other error", mine, "m"), "");
}

TEST(ManifestDiffTest, GptPresetFingerprintsAreUnchanged) {
  const std::pair<const char*, uint64_t> pinned[] = {{"tiny", 0x407e95e9c3efc6b1ull},
                                                     {"small", 0x50c88a48583eb13dull},
                                                     {"gpt2-124m", 0x878514ccfc5f5926ull},
                                                     {"gpt2-350m", 0x32f0764fbed55a1full}};
  for (const auto& [spec, fp] : pinned) {
    auto s = LoadModelSource(spec);
    ASSERT_TRUE(s.ok()) << s.status();
    EXPECT_EQ(absl::StrFormat("%016x", s->manifest.fingerprint()), absl::StrFormat("%016x", fp))
        << spec;
  }
}

}  // namespace
}  // namespace diloco
