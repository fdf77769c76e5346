// The outer step a shard left to choose it (OuterChoice::kAuto, diloco-server's default) takes:
// a fragment whose first push is top-k steps as the sparse step (no momentum, lr 2) does, bit for
// bit, one whose first push is dense as the dense step does, and a push of the other kind after
// that is refused BadCodec naming both flags, with nothing merged (docs/protocol.md, "Sparse
// top-k pushes").
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/codec.h"
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
  Fleet(OuterChoice choice, kernels::NesterovParams dense) {
    ShardOptions o = TinyOptions();
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

TEST(ShardOuterChoiceTest, APushOfTheOtherKindIsRefusedNamingBothFlags) {
  for (const bool topk_first : {true, false}) {
    Fleet f(OuterChoice::kAuto, kDense);
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
