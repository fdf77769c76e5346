// Token files (llm.c .bin), the synthetic Markov mixture, the batcher, and the coverage of the
// workers' held-out set: every chain equally, the floor on exactly the evaluated tokens.
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "gtest/gtest.h"
#include "tests/util/temp_dir.h"
#include "worker/data/batcher.h"
#include "worker/data/markov.h"
#include "worker/data/source.h"
#include "worker/data/token_file.h"
#include "worker/model/evaluate.h"
#include "worker/model/gpt/gpt_config.h"
#include "worker/model/gpt/gpt_trainer_family.h"
#include "worker/model/heldout.h"

namespace diloco::data {
namespace {

class TokenFileTest : public ::testing::Test {
 protected:
  std::string Path(const char* name) { return dir_.Sub(name); }
  // Writes a raw file: header ints then tokens.
  void WriteRaw(const std::string& path, std::vector<int32_t> header, std::vector<uint16_t> toks,
                size_t truncate_to = SIZE_MAX) {
    header.resize(kTokenFileHeaderInts, 0);
    std::string bytes(reinterpret_cast<const char*>(header.data()), header.size() * 4);
    bytes.append(reinterpret_cast<const char*>(toks.data()), toks.size() * 2);
    if (truncate_to < bytes.size()) bytes.resize(truncate_to);
    std::ofstream(path, std::ios::binary) << bytes;
  }
  diloco::testing::TempDir dir_{"model_data_test_"};
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
  auto w = m->ShardWeights(5, 8, 0.8);
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

// Fewer workers than chains: every chain is some worker's own, none is left to the 20% tail
// (3 workers of 4 chains once left chain 3 almost untrained, and it was a quarter of the
// held-out set).
TEST(Markov, EveryChainIsOwnedByAWorker) {
  MarkovMixtureOptions o;
  o.components = 4;
  auto m = MarkovMixture::Create(o);
  ASSERT_TRUE(m.ok());
  std::vector<double> total(4, 0.0);
  for (int w = 0; w < 3; ++w) {
    auto s = m->ShardWeights(w, 3, 0.8);
    EXPECT_NEAR(s[0] + s[1] + s[2] + s[3], 1.0, 1e-12);
    for (int k = 0; k < 4; ++k) total[k] += s[k];
  }
  auto w0 = m->ShardWeights(0, 3, 0.8);
  EXPECT_DOUBLE_EQ(w0[0], 0.4);  // worker 0 owns chains 0 and 3
  EXPECT_DOUBLE_EQ(w0[3], 0.4);
  EXPECT_DOUBLE_EQ(w0[1], 0.1);
  for (int k = 0; k < 4; ++k) EXPECT_GE(total[k], 0.5) << "chain " << k << " is nobody's";
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
  // 999 targets: W = 62 whole windows of 16; 15 batches of 4 = 60 windows spread over them.
  ASSERT_EQ(a.NumWindows(), 62);
  ASSERT_EQ(a.NumFixedBatches(), 15);
  a.Fixed(1, 15, in, tg);
  EXPECT_EQ(in[0], 64);  // window j = 4: floor(4 * 62 / 60) = 4
  EXPECT_EQ(a.FixedStart(1, 2, 15), 96);
  EXPECT_EQ(a.FixedStart(14, 3, 15), 60 * 16);  // j = 59: floor(59 * 62 / 60) = 60
}

TEST(Batcher, HeldoutWindowsSpreadOverTheWholeStream) {
  std::vector<uint16_t> toks(64 * 100 + 1);
  Batcher h(toks, 4, 64, 0);
  ASSERT_EQ(h.NumWindows(), 100);
  for (int64_t batches : {1, 2, 5, 25}) {
    int64_t prev = -64;
    for (int64_t i = 0; i < batches; ++i)
      for (int b = 0; b < 4; ++b) {
        const int64_t s = h.FixedStart(i, b, batches);
        EXPECT_EQ(s % 64, 0);
        EXPECT_GE(s, prev + 64) << "overlap at batch " << i << " of " << batches;  // J <= W
        EXPECT_LE(s + 64 + 1, int64_t(toks.size()));                               // no wrap
        prev = s;
      }
    // Evenly: window j starts at floor(j * W / J) windows; the last one is in the last 1/J.
    const int64_t J = 4 * batches;
    EXPECT_GE(h.FixedStart(batches - 1, 3, batches), (100 - (100 + J - 1) / J) * 64);
  }
  // More windows than the stream has: some are taken twice, none is out of range.
  for (int64_t i = 0; i < 30; ++i)
    for (int b = 0; b < 4; ++b) EXPECT_LE(h.FixedStart(i, b, 30) + 65, int64_t(toks.size()));
}

// The held-out stream: segment s from chain s % K; the training streams are drawn as before.
TEST(Source, HeldoutStreamTakesTheChainsInTurn) {
  DataOptions o;
  o.train_tokens = 0;
  auto d = LoadData(o, 256);
  ASSERT_TRUE(d.ok()) << d.status();
  const int K = o.synthetic.components, L = o.synthetic.segment_length;
  ASSERT_EQ(d->heldout.size(), size_t(o.heldout_tokens));
  std::vector<int64_t> targets(K, 0);
  for (size_t t = 0; t < d->heldout_stream.chain.size(); ++t) {
    ASSERT_EQ(d->heldout_stream.chain[t], (t / L) % K) << t;
    if (t > 0) ++targets[d->heldout_stream.chain[t]];
  }
  // The whole stream's targets are split exactly evenly too (what eval of the file reads).
  for (int k = 0; k < K; ++k) EXPECT_EQ(targets[k], targets[0]) << k;
}

// The worker's default held-out set (tiny and small presets, batch 8, seq_len = context,
// eval_batches 4 and 16): the evaluated targets of every chain, counted from the windows the
// trainers read, are exactly equal, and the floor is the mean of the chains' floors.
struct Coverage {
  std::vector<int64_t> tokens;
  std::vector<double> entropy;  // mean row entropy at the chain's targets
};

Coverage CountCoverage(const DataStreams& d, const Batcher& h, int batches) {
  const int K = d.mixture->components();
  Coverage c{std::vector<int64_t>(K, 0), std::vector<double>(K, 0.0)};
  for (int i = 0; i < batches; ++i)
    for (int b = 0; b < h.batch(); ++b) {
      const int64_t start = h.FixedStart(i, b, batches);
      for (int t = 0; t < h.seq_len(); ++t) {  // target t of the window: token start + t + 1
        const int k = d.heldout_stream.chain[start + t + 1];
        ++c.tokens[k];
        c.entropy[k] += d.mixture->RowEntropy(k, d.heldout_stream.tokens[start + t]);
      }
    }
  for (int k = 0; k < K; ++k) c.entropy[k] /= double(c.tokens[k]);
  return c;
}

model::TrainerOptions WorkerDefaults(const std::string& preset, int eval_batches) {
  model::TrainerOptions o;  // what diloco-worker builds from its default flags
  o.model = model::GptTrainerModel(*ParseGptConfig(preset));
  o.batch_size = 8;
  o.seq_len = 0;
  o.eval_batches = eval_batches;
  o.data = DataOptions{};
  return o;
}

TEST(Heldout, EveryChainGetsTheSameShareOfTheWorkersHeldoutSet) {
  for (const std::string preset : {"tiny", "small"})
    for (int eval_batches : {4, 16}) {
      const model::TrainerOptions o = WorkerDefaults(preset, eval_batches);
      DataOptions data = o.data;
      data.train_tokens = 0;
      auto d = LoadData(data, o.model.vocab);
      ASSERT_TRUE(d.ok()) << d.status();
      const Batcher h(d->heldout, o.batch_size, o.model.context, 0);
      const Coverage c = CountCoverage(*d, h, eval_batches);
      const int64_t total = model::HeldoutTokens(o);
      EXPECT_EQ(total, int64_t(eval_batches) * 8 * o.model.context);
      std::printf("%s, eval_batches %d: %lld held-out targets, per chain", preset.c_str(),
                  eval_batches, static_cast<long long>(total));
      for (size_t k = 0; k < c.tokens.size(); ++k) {
        std::printf(" %lld", static_cast<long long>(c.tokens[k]));
        EXPECT_EQ(c.tokens[k] * int64_t(c.tokens.size()), total) << preset << " chain " << k;
      }
      std::printf("\n");
      // The library's own per-chain count agrees with this one.
      const auto shares = model::HeldoutOracleByChain(*d, h, eval_batches);
      ASSERT_EQ(shares.size(), c.tokens.size());
      for (size_t k = 0; k < shares.size(); ++k) {
        EXPECT_EQ(shares[k].tokens, c.tokens[k]);
        EXPECT_NEAR(shares[k].entropy, c.entropy[k], 1e-12);
      }
    }
}

// Not only the defaults: every window count that is a multiple of K, for every seq_len that
// divides the segment length, meets every chain exactly equally on the default stream.
TEST(Heldout, EvenCoverageForAnyMultipleOfKWindows) {
  DataOptions data;
  data.train_tokens = 0;
  auto d = LoadData(data, 256);
  ASSERT_TRUE(d.ok()) << d.status();
  const int K = data.synthetic.components;
  for (int seq_len : {16, 32, 64, 128, 256})
    for (int batch : {1, 4}) {
      const Batcher h(d->heldout, batch, seq_len, 0);
      for (int batches = K / batch; batches * batch <= 512; batches += K / batch) {
        const Coverage c = CountCoverage(*d, h, batches);
        for (int k = 1; k < K; ++k)
          ASSERT_EQ(c.tokens[k], c.tokens[0])
              << "seq_len " << seq_len << ", " << batches << " batches of " << batch;
      }
    }
}

TEST(Heldout, TheFloorIsTheMeanOfTheChainsFloors) {
  for (int eval_batches : {4, 16}) {
    const model::TrainerOptions o = WorkerDefaults("tiny", eval_batches);
    auto floor = model::HeldoutOracle(o);
    ASSERT_TRUE(floor.ok()) << floor.status();
    DataOptions data = o.data;
    data.train_tokens = 0;
    auto d = LoadData(data, o.model.vocab);
    ASSERT_TRUE(d.ok());
    const Coverage c = CountCoverage(*d, Batcher(d->heldout, 8, o.model.context, 0), eval_batches);
    double mean = 0;
    for (double e : c.entropy) mean += e / double(c.entropy.size());
    EXPECT_NEAR(*floor, mean, 1e-12) << "eval_batches " << eval_batches;
    // And it is a fair estimate of the stream's entropy rate (every chain weighs 1/K).
    EXPECT_NEAR(*floor, d->heldout_entropy_rate, 0.1);
  }
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
