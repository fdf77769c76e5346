// The plan: deterministic, balanced, covering every parameter exactly once; fingerprints that
// change with the model and the cut; gather/scatter inverse of each other.
#include "common/plan.h"

#include <gtest/gtest.h>

#include <numeric>

#include "common/checksum.h"
#include "worker/model/gpt/gpt_config.h"

namespace diloco {
namespace {

Manifest Gpt(const std::string& spec) { return *GptManifest(*ParseGptConfig(spec)); }

TEST(PlanTest, CoversEveryParameterOnceAndIsDeterministic) {
  const Manifest m = Gpt("L=3,H=4,C=64,T=32,V=256");
  auto a = Plan::Create(m, 7, 3), b = Plan::Create(m, 7, 3);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->fingerprint(), b->fingerprint());
  std::vector<int> hits(m.total_elements(), 0);
  uint64_t max = 0, min = UINT64_MAX;
  for (const auto& f : a->fragments()) {
    uint64_t n = 0;
    for (const auto& p : f.pieces) {
      for (uint64_t i = 0; i < p.length; ++i) ++hits[p.flat_offset + i];
      n += p.length;
    }
    EXPECT_EQ(n, f.numel);
    max = std::max(max, n);
    min = std::min(min, n);
    EXPECT_LT(f.shard, 3u);
  }
  for (int h : hits) ASSERT_EQ(h, 1);
  // Balanced: large tensors are split, so fragments are within one budget of each other.
  const uint64_t budget = (m.total_elements() + 6) / 7;
  EXPECT_LE(max - min, budget / 2) << "min " << min << " max " << max;
  for (uint32_t s = 0; s < 3; ++s) EXPECT_FALSE(a->FragmentsOfShard(s).empty());
}

TEST(PlanTest, FingerprintChangesWithModelAndCut) {
  const Manifest m = Gpt("tiny");
  const uint64_t base = Plan::Create(m, 4, 2)->fingerprint();
  EXPECT_NE(Plan::Create(m, 5, 2)->fingerprint(), base);
  EXPECT_NE(Plan::Create(m, 4, 1)->fingerprint(), base);
  EXPECT_NE(Plan::Create(Gpt("L=3,H=4,C=64,T=64,V=256"), 4, 2)->fingerprint(), base);
  EXPECT_NE(Gpt("tiny").fingerprint(), Gpt("L=2,H=4,C=64,T=64,V=255").fingerprint());
}

TEST(PlanTest, GatherScatterRoundTrip) {
  const Manifest m = Gpt("tiny");
  auto plan = Plan::Create(m, 5, 2);
  std::vector<float> flat(m.total_elements());
  std::iota(flat.begin(), flat.end(), 0.0f);
  std::vector<float> back(flat.size(), -1.0f);
  for (const auto& f : plan->fragments()) {
    std::vector<float> frag(f.numel);
    plan->Gather(f, flat.data(), frag.data());
    plan->Scatter(f, frag.data(), back.data());
  }
  EXPECT_EQ(back, flat);
}

TEST(PlanTest, BadInputIsRefused) {
  const Manifest m = Gpt("tiny");
  EXPECT_FALSE(Plan::Create(m, 0, 1).ok());
  EXPECT_FALSE(Plan::Create(m, 2, 3).ok());           // more shards than fragments
  EXPECT_FALSE(ParseGptConfig("L=2,H=3,C=64").ok());  // width not a multiple of heads
  EXPECT_FALSE(ParseGptConfig("bogus").ok());
  EXPECT_FALSE(Manifest::Create({{"a", {2}}, {"a", {3}}}).ok());  // duplicate name
  EXPECT_FALSE(Manifest::Create({{"a", {0}}}).ok());
}

}  // namespace
}  // namespace diloco

namespace diloco {
namespace {

TEST(ChecksumTest, EveryBuildThisCpuRunsEqualsTheLibrarysForEverySize) {
  std::vector<uint8_t> b((1 << 20) + 64);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 131 + (i >> 9));
  // XXH3-64 of the empty input, seed 0, as published by xxHash: the library build itself is
  // the one every other build is compared with, so it is pinned to the specification.
  EXPECT_EQ(Checksum64Portable(b.data(), 0), 0x2D06800538D394C2ull);
  const auto impls = internal::ChecksumImpls();
  ASSERT_FALSE(impls.empty());
  for (size_t n : {0ul, 1ul, 3ul, 16ul, 17ul, 128ul, 129ul, 240ul, 241ul, 1000ul, 1024ul, 4096ul,
                   65537ul, size_t{1} << 20})
    for (size_t misalign : {0ul, 1ul, 7ul, 33ul}) {
      const uint8_t* p = b.data() + misalign;
      const uint64_t want = Checksum64Portable(p, n);
      EXPECT_EQ(Checksum64(p, n), want) << n << " +" << misalign;
      for (const auto& impl : impls) EXPECT_EQ(impl.fn(p, n), want) << impl.name << " " << n;
    }
  EXPECT_NE(Checksum64(b.data(), 100), Checksum64(b.data() + 1, 100));
}

}  // namespace
}  // namespace diloco
