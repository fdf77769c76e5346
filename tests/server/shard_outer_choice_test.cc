// The outer step a shard left to choose it (OuterChoice::kAuto, diloco-server's default) takes:
// top-k pushes step as the sparse step (no momentum, lr 2) does, bit for bit, dense ones as the
// dense step does; a worker that switches kinds (--codec=auto) has each push stepped as its codec
// asks, and a round holding both kinds takes the dense pushes' Nesterov step on their share and
// then the top-k pushes' plain step, leaving the momentum to the dense ones. Per arrival (Delayed
// Nesterov) the first push chooses and a push of the other kind is refused BadCodec naming both
// flags, with nothing merged (docs/protocol.md, "Sparse top-k pushes").
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/codec.h"
#include "kernels/optim.h"
#include "kernels/outer.h"
#include "tests/server/shard_harness.h"

namespace diloco::server::testing {
namespace {

using wire::AckStatus;
using wire::ErrorCode;
using wire::MsgType;

const kernels::Codec kTopK{kernels::CodecKind::kTopK, 64, 4};
const kernels::Codec kInt8{kernels::CodecKind::kInt8, 64};
const kernels::NesterovParams kDense{1.3f, 0.7f};
const kernels::NesterovParams kSparse{2.0f, 0.0f};

class Fleet {
 public:
  Fleet(OuterChoice choice, kernels::NesterovParams dense, OuterMode mode = OuterMode::kRounds) {
    ShardOptions o = TinyOptions();
    o.outer_mode = mode;
    o.download = wire::kFragmentCodec;  // theta is what the shard publishes, bit for bit
    o.outer_choice = choice;
    o.outer = dense;
    o.sparse_outer = kSparse;
    h_ = std::make_unique<ShardHarness>(o);
    n_ = h_->fragment(0).numel;
    h_->Hello("a", 1);
    const std::vector<Outgoing> init = h_->Init("a", 1, 0, std::vector<float>(n_, 1.0f));
    EXPECT_EQ(Only(init, MsgType::PushAck)->header.ack, AckStatus::Initialized);
  }

  std::vector<float> Delta(uint64_t seq) const {
    std::vector<float> d;
    for (uint64_t i = 0; i < n_; ++i)
      d.push_back(0.001f * (float((i * 37 + seq * 11) % 101) - 50.0f));
    return d;
  }

  // Pushes seq (from version seq) and closes its round; "" when queued, else the refusal.
  std::string Round(uint64_t seq, kernels::Codec c) {
    const std::vector<Outgoing> r = h_->Push("a", 1, 0, seq, seq, Delta(seq), 100, 10, c);
    for (const Outgoing& e : r)
      if (e.header.type == MsgType::Error) {
        EXPECT_EQ(e.header.error_code, ErrorCode::BadCodec);
        return e.header.message;
      }
    EXPECT_EQ(Only(r, MsgType::PushAck)->header.ack, AckStatus::Queued);
    EXPECT_FALSE(h_->Tick().empty());
    EXPECT_EQ(h_->shard().published_version(0), seq + 1);
    return "";
  }

  std::vector<float> theta() const { return h_->shard().params(0); }
  uint64_t numel() const { return n_; }
  ShardHarness& harness() { return *h_; }

 private:
  std::unique_ptr<ShardHarness> h_;
  uint64_t n_ = 0;
};

TEST(ShardOuterChoiceTest, TopKPushesTakeTheSparseStep) {
  Fleet chosen(OuterChoice::kAuto, kDense), sparse(OuterChoice::kSparse, kDense),
      dense(OuterChoice::kNesterov, kDense);
  for (uint64_t seq = 1; seq <= 3; ++seq) {
    ASSERT_EQ(chosen.Round(seq, kTopK), "");
    ASSERT_EQ(sparse.Round(seq, kTopK), "");
    ASSERT_EQ(dense.Round(seq, kTopK), "");
  }
  EXPECT_EQ(chosen.theta(), sparse.theta());
  EXPECT_NE(chosen.theta(), dense.theta());
}

TEST(ShardOuterChoiceTest, DensePushesKeepTheDenseStep) {
  Fleet chosen(OuterChoice::kAuto, kDense), dense(OuterChoice::kNesterov, kDense);
  for (uint64_t seq = 1; seq <= 3; ++seq) {
    ASSERT_EQ(chosen.Round(seq, kInt8), "");
    ASSERT_EQ(dense.Round(seq, kInt8), "");
  }
  EXPECT_EQ(chosen.theta(), dense.theta());
}

// What the shard decodes from a push of `values` with codec c (one chunk: the fragment is small).
std::vector<float> Decoded(kernels::Codec c, const std::vector<float>& values) {
  const auto enc = ShardHarness::Encode(c, values);
  EXPECT_EQ(enc.size(), 1u);
  std::vector<float> out(values.size());
  EXPECT_TRUE(kernels::Decode(c, enc[0], out).ok());
  return out;
}

TEST(ShardOuterChoiceTest, AWorkerThatSwitchesKindsHasEachPushSteppedAsItsCodecAsks) {
  Fleet f(OuterChoice::kAuto, kDense);
  std::vector<float> theta(f.numel(), 1.0f), m(f.numel(), 0.0f);
  const kernels::Codec kinds[] = {kInt8, kTopK, kTopK, kInt8};
  for (uint64_t seq = 1; seq <= 4; ++seq) {
    const kernels::Codec c = kinds[seq - 1];
    ASSERT_EQ(f.Round(seq, c), "") << seq;
    const std::vector<float> d = Decoded(c, f.Delta(seq));
    if (kernels::IsTopK(c.kind))
      ASSERT_TRUE(kernels::SgdStep(kSparse.lr, theta, d).ok());
    else
      kernels::NesterovStep(kDense, theta, m, d);
    EXPECT_EQ(f.theta(), theta) << "after push " << seq << " (" << kernels::CodecName(c) << ")";
  }
}

TEST(ShardOuterChoiceTest, ARoundOfBothKindsStepsEachOnItsShareAndLeavesTheMomentumToTheDense) {
  ShardOptions o = TinyOptions();
  o.download = wire::kFragmentCodec;
  o.outer_choice = OuterChoice::kAuto;
  o.outer = kDense;
  o.sparse_outer = kSparse;
  o.round.quorum = 2;
  ShardHarness h(o);
  const uint64_t n = h.fragment(0).numel;
  h.Hello("a", 1);
  h.Hello("b", 2);
  ASSERT_EQ(Only(h.Init("a", 1, 0, std::vector<float>(n, 1.0f)), MsgType::PushAck)->header.ack,
            AckStatus::Initialized);
  std::vector<float> theta(n, 1.0f), m(n, 0.0f);
  for (uint64_t seq = 1; seq <= 3; ++seq) {
    std::vector<float> dense(n), sparse(n);
    for (uint64_t i = 0; i < n; ++i) {
      dense[i] = 0.001f * (float((i * 13 + seq * 7) % 97) - 48.0f);
      sparse[i] = 0.002f * (float((i * 29 + seq * 5) % 89) - 44.0f);
    }
    ASSERT_EQ(
        Only(h.Push("a", 1, 0, seq, seq, dense, 100, 10, kInt8), MsgType::PushAck)->header.ack,
        AckStatus::Queued);
    ASSERT_EQ(
        Only(h.Push("b", 2, 0, seq, seq, sparse, 100, 10, kTopK), MsgType::PushAck)->header.ack,
        AckStatus::Queued);
    EXPECT_FALSE(h.Tick().empty());
    ASSERT_EQ(h.shard().published_version(0), seq + 1);
    // Equal weights: each lane holds half of the round, its delta its pushes' over the two.
    std::vector<float> dd = Decoded(kInt8, dense), ds = Decoded(kTopK, sparse);
    for (float& v : dd) v *= 0.5f;
    for (float& v : ds) v *= 0.5f;
    ASSERT_TRUE(kernels::PartialNesterovStep(kDense, 0.5, theta, m, dd).ok());
    ASSERT_TRUE(kernels::SgdStep(kSparse.lr, theta, ds).ok());
    EXPECT_EQ(h.shard().params(0), theta) << "round " << seq;
  }
}

TEST(ShardOuterChoiceTest, PerArrivalAPushOfTheOtherKindIsRefusedNamingBothFlags) {
  for (const bool topk_first : {true, false}) {
    Fleet f(OuterChoice::kAuto, kDense, OuterMode::kDelayedNesterov);
    ASSERT_EQ(f.Round(1, topk_first ? kTopK : kInt8), "");
    const std::vector<float> before = f.theta();
    const std::string why = f.Round(2, topk_first ? kInt8 : kTopK);
    EXPECT_NE(why.find(topk_first ? "sparse pushes' outer step" : "dense pushes' outer step"),
              std::string::npos)
        << why;
    EXPECT_NE(why.find("--outer_step"), std::string::npos) << why;
    EXPECT_NE(why.find("--codec"), std::string::npos) << why;
    EXPECT_TRUE(f.harness().Tick().empty());
    EXPECT_EQ(f.theta(), before);
    EXPECT_EQ(f.Round(2, topk_first ? kTopK : kInt8), "");  // the same seq, of its kind, goes in
  }
}

TEST(ShardOuterChoiceTest, AChosenStepTakesEveryCodec) {
  Fleet f(OuterChoice::kNesterov, kDense);
  ASSERT_EQ(f.Round(1, kTopK), "");
  EXPECT_EQ(f.Round(2, kInt8), "");
}

}  // namespace
}  // namespace diloco::server::testing
