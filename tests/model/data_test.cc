// Token files (llm.c .bin), the synthetic Markov mixture, and the batcher.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "gtest/gtest.h"
#include "worker/data/batcher.h"
#include "worker/data/markov.h"
#include "worker/data/source.h"
#include "worker/data/token_file.h"

namespace diloco::data {
namespace {

class TokenFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("model_data_test_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string Path(const char* name) { return (dir_ / name).string(); }
  // Writes a raw file: header ints then tokens.
  void WriteRaw(const std::string& path, std::vector<int32_t> header, std::vector<uint16_t> toks,
                size_t truncate_to = SIZE_MAX) {
    header.resize(kTokenFileHeaderInts, 0);
    std::string bytes(reinterpret_cast<const char*>(header.data()), header.size() * 4);
    bytes.append(reinterpret_cast<const char*>(toks.data()), toks.size() * 2);
    if (truncate_to < bytes.size()) bytes.resize(truncate_to);
    std::ofstream(path, std::ios::binary) << bytes;
  }
  std::filesystem::path dir_;
};

TEST_F(TokenFileTest, RoundTrip) {
  std::vector<uint16_t> toks = {0, 1, 255, 50256, 7};
  ASSERT_TRUE(WriteTokenFile(Path("a.bin"), toks).ok());
  auto r = ReadTokenFile(Path("a.bin"), 50257);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(*r, toks);
  EXPECT_EQ(std::filesystem::file_size(Path("a.bin")), 1024u + 10u);
}

TEST_F(TokenFileTest, RejectsWrongMagic) {
  WriteRaw(Path("m.bin"), {20240521, 1, 2}, {1, 2});
  auto r = ReadTokenFile(Path("m.bin"), 256);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("magic"), std::string::npos) << r.status();
}

TEST_F(TokenFileTest, RejectsWrongVersion) {
  WriteRaw(Path("v.bin"), {kTokenFileMagic, 2, 2}, {1, 2});
  auto r = ReadTokenFile(Path("v.bin"), 256);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(r.status().message().find("version"), std::string::npos) << r.status();
}

TEST_F(TokenFileTest, RejectsTruncatedTokens) {
  WriteRaw(Path("t.bin"), {kTokenFileMagic, 1, 3}, {1, 2});  // says 3, has 2
  auto r = ReadTokenFile(Path("t.bin"), 256);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("truncated"), std::string::npos) << r.status();
}

TEST_F(TokenFileTest, RejectsTruncatedHeader) {
  WriteRaw(Path("h.bin"), {kTokenFileMagic, 1, 0}, {}, 100);
  EXPECT_EQ(ReadTokenFile(Path("h.bin"), 256).status().code(), absl::StatusCode::kDataLoss);
}

TEST_F(TokenFileTest, RejectsOutOfVocabulary) {
  WriteRaw(Path("o.bin"), {kTokenFileMagic, 1, 3}, {1, 256, 2});
  auto r = ReadTokenFile(Path("o.bin"), 256);
  EXPECT_EQ(r.status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_NE(r.status().message().find("position 1"), std::string::npos) << r.status();
  EXPECT_TRUE(ReadTokenFile(Path("o.bin"), 257).ok());
}

TEST_F(TokenFileTest, MissingFile) {
  EXPECT_EQ(ReadTokenFile(Path("none.bin"), 256).status().code(), absl::StatusCode::kNotFound);
}

TEST_F(TokenFileTest, TextAsBytes) {
  std::ofstream(Path("t.txt"), std::ios::binary) << "hi\xff";
  auto r = ReadTextAsBytes(Path("t.txt"));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(*r, (std::vector<uint16_t>{'h', 'i', 255}));
}

TEST(Markov, EntropyRateMatchesEmpiricalLoss) {
  MarkovMixtureOptions o;
  o.components = 3;
  o.seed = 5;
  auto m = MarkovMixture::Create(o);
  ASSERT_TRUE(m.ok()) << m.status();
  for (int k = 0; k < 3; ++k) {
    EXPECT_GT(m->EntropyRate(k), 0.5);
    EXPECT_LT(m->EntropyRate(k), std::log(4.0));
  }
  // The oracle loss of a long stream of one chain converges to that chain's entropy rate.
  std::vector<double> w = {1, 0, 0};
  MarkovStream s = m->Generate(w, 400000, 9);
  EXPECT_NEAR(m->OracleLoss(s, 0, 400000 - 1), m->EntropyRate(0), 0.01);
  // Every generated transition is one the chain allows (the oracle never sees -log 0).
  for (uint8_t c : s.chain) EXPECT_EQ(c, 0);
}

TEST(Markov, ShardsAreNonIidAndHeldoutIsUniform) {
  MarkovMixtureOptions o;
  o.components = 4;
  auto m = MarkovMixture::Create(o);
  ASSERT_TRUE(m.ok());
  auto w = m->ShardWeights(5, 0.8);
  EXPECT_DOUBLE_EQ(w[1], 0.8);
  EXPECT_NEAR(w[0] + w[2] + w[3], 0.2, 1e-12);
  MarkovStream s = m->Generate(w, 1 << 20, 3);
  std::vector<int> count(4, 0);
  for (uint8_t c : s.chain) ++count[c];
  EXPECT_NEAR(count[1] / double(s.chain.size()), 0.8, 0.03);
  auto u = m->UniformWeights();
  EXPECT_NEAR(m->MixtureEntropyRate(u),
              (m->EntropyRate(0) + m->EntropyRate(1) + m->EntropyRate(2) + m->EntropyRate(3)) / 4,
              1e-12);
}

TEST(Markov, DeterministicInSeeds) {
  MarkovMixtureOptions o;
  auto a = MarkovMixture::Create(o), b = MarkovMixture::Create(o);
  ASSERT_TRUE(a.ok() && b.ok());
  auto w = a->UniformWeights();
  EXPECT_EQ(a->Generate(w, 5000, 1).tokens, b->Generate(w, 5000, 1).tokens);
  EXPECT_NE(a->Generate(w, 5000, 1).tokens, a->Generate(w, 5000, 2).tokens);
  o.seed = 2;
  auto c = MarkovMixture::Create(o);
  EXPECT_NE(a->EntropyRate(0), c->EntropyRate(0));
}

TEST(Markov, RejectsBadOptions) {
  MarkovMixtureOptions o;
  o.successors = 0;
  EXPECT_FALSE(MarkovMixture::Create(o).ok());
  o = {};
  o.states = 300;
  EXPECT_FALSE(MarkovMixture::Create(o).ok());
}

TEST(Batcher, WindowsAreShiftedAndDeterministic) {
  std::vector<uint16_t> toks(1000);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = static_cast<uint16_t>(i % 256);
  Batcher a(toks, 4, 16, 7), b(toks, 4, 16, 7);
  std::vector<int32_t> in(64), tg(64), in2(64), tg2(64);
  for (int step = 0; step < 10; ++step) {
    a.Next(in, tg);
    b.Next(in2, tg2);
    EXPECT_EQ(in, in2);
    EXPECT_EQ(tg, tg2);
    for (int i = 0; i < 64; ++i) EXPECT_EQ(tg[i], (in[i] + 1) % 256);
  }
  a.Fixed(1, in, tg);
  EXPECT_EQ(in[0], 64);  // window (1*4+0)*16
  EXPECT_EQ(a.FixedStart(1, 2), 96);
}

TEST(Source, WorkersShareHeldoutAndSplitFiles) {
  DataOptions o;
  o.train_tokens = 10000;
  o.heldout_tokens = 5000;
  o.num_workers = 2;
  auto d0 = LoadData(o, 256);
  o.worker_index = 1;
  auto d1 = LoadData(o, 256);
  ASSERT_TRUE(d0.ok() && d1.ok());
  EXPECT_EQ(d0->heldout, d1->heldout);
  EXPECT_NE(d0->train, d1->train);
  EXPECT_NEAR(d0->heldout_entropy_rate, d1->heldout_entropy_rate, 0);
  o.worker_index = 2;
  EXPECT_FALSE(LoadData(o, 256).ok());
}

}  // namespace
}  // namespace diloco::data
