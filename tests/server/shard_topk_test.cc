// Top-k pushes at a real shard (no sockets): a push of either top-k kind (topk's Elias-Fano
// indices, topk-packed's packed ones) merges its sent entries and nothing else, and a hostile
// one (a repeated index, a damaged Elias-Fano high part, k missing from the header, k on a dense
// codec) is refused BadCodec naming the cause, with nothing merged, so the same seq still goes
// in after.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "kernels/codec.h"
#include "kernels/topk.h"
#include "tests/server/shard_harness.h"

namespace diloco::server::testing {
namespace {

using wire::AckStatus;
using wire::ErrorCode;
using wire::MsgType;

// Elias-Fano: 4 fields of 4 low bits, then 4 + 3 high bits (byte 2 of the record).
const kernels::Codec kTopK{kernels::CodecKind::kTopK, 64, 4};
const kernels::Codec kPacked{kernels::CodecKind::kTopKPacked, 64, 4};  // 4 fields of 6 bits

class ShardTopKTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ShardOptions o = TinyOptions();
    o.download = wire::kFragmentCodec;  // theta is what the shard publishes, bit for bit
    h_ = std::make_unique<ShardHarness>(o);
    n_ = h_->fragment(0).numel;
    ASSERT_GT(n_, 64u);
    h_->Hello("a", 1);
    // Only() points into the vector it is given: keep the answers alive while reading them.
    const std::vector<Outgoing> init = h_->Init("a", 1, 0, std::vector<float>(n_, 1.0f));
    const Outgoing* ack = Only(init, MsgType::PushAck);
    ASSERT_NE(ack, nullptr);
    ASSERT_EQ(ack->header.ack, AckStatus::Initialized);
    for (uint64_t i = 0; i < n_; ++i) delta_.push_back(0.001f * (float((i * 37) % 101) - 50.0f));
  }

  // The error the shard answers `h` with `payload`, or "" when it is no Error.
  std::string Refusal(const wire::HeaderFields& h, const std::vector<std::vector<uint8_t>>& p) {
    const std::vector<Outgoing> out = h_->Send("a", h, p);
    const Outgoing* e = Only(out, MsgType::Error);
    if (e == nullptr) return "";
    EXPECT_EQ(e->header.error_code, ErrorCode::BadCodec) << e->header.message;
    return e->header.message;
  }

  void ExpectMergesTheSentEntriesOnly(kernels::Codec c);

  std::unique_ptr<ShardHarness> h_;
  uint64_t n_ = 0;
  std::vector<float> delta_;
};

void ShardTopKTest::ExpectMergesTheSentEntriesOnly(kernels::Codec c) {
  const auto payload = ShardHarness::Encode(c, delta_);
  ASSERT_EQ(payload.size(), 1u);
  std::vector<float> sent(n_);
  ASSERT_TRUE(kernels::Decode(c, payload[0], sent).ok());
  auto r = h_->Push("a", 1, 0, 1, 1, delta_, 100, 10, c);
  EXPECT_EQ(Only(r, MsgType::PushAck)->header.ack, AckStatus::Queued);
  EXPECT_FALSE(h_->Tick().empty());  // the only live worker pushed: the round closes
  ASSERT_EQ(h_->shard().published_version(0), 2u);
  const std::vector<float> theta = h_->shard().params(0);
  size_t moved = 0;
  for (uint64_t i = 0; i < n_; ++i) {
    ASSERT_EQ(theta[i] != 1.0f, sent[i] != 0.0f) << i;
    moved += theta[i] != 1.0f;
  }
  EXPECT_EQ(moved, (n_ / 64) * 4 + (n_ % 64 ? kernels::TopKCount(c, n_ % 64) : 0));
}

TEST_F(ShardTopKTest, MergesTheSentEntriesOnly) { ExpectMergesTheSentEntriesOnly(kTopK); }
TEST_F(ShardTopKTest, MergesTheSentEntriesOfTheFirstFormOnly) {
  ExpectMergesTheSentEntriesOnly(kPacked);
}

TEST_F(ShardTopKTest, HostilePushesAreRefusedAndChangeNothing) {
  const std::vector<float> before = h_->shard().params(0);
  auto payload = ShardHarness::Encode(kPacked, delta_);
  // Block 0's second index made equal to its first (6-bit fields, LSB first).
  uint8_t* rec = payload[0].data() + kernels::internal::TopKRecordOffset(kPacked, n_, 0);
  const uint32_t first = rec[0] & 0x3Fu;
  rec[0] = static_cast<uint8_t>((rec[0] & 0x3Fu) | ((first & 0x3u) << 6));
  rec[1] = static_cast<uint8_t>((rec[1] & ~0x0Fu) | (first >> 2));
  EXPECT_NE(Refusal(h_->PushFields(1, 0, 1, 1, n_, 100, 10, kPacked), payload)
                .find("repeats or is out of order"),
            std::string::npos);
  payload = ShardHarness::Encode(kTopK, delta_);
  const auto valid = payload;
  payload[0][kernels::internal::TopKRecordOffset(kTopK, n_, 0) + 2] = 0;  // no high bit set
  EXPECT_NE(Refusal(h_->PushFields(1, 0, 1, 1, n_, 100, 10, kTopK), payload)
                .find("Elias-Fano high bits mark 0 entries, the codec keeps 4"),
            std::string::npos);
  auto no_k = h_->PushFields(1, 0, 1, 1, n_, 100, 10, kTopK);
  no_k.topk = 0;
  EXPECT_NE(Refusal(no_k, valid).find("k must be in [1, 64], got 0"), std::string::npos);
  const kernels::Codec int8{kernels::CodecKind::kInt8, 64};
  auto dense = h_->PushFields(1, 0, 1, 1, n_, 100, 10, int8);
  dense.topk = 4;
  EXPECT_NE(Refusal(dense, ShardHarness::Encode(int8, delta_)).find("takes no k"),
            std::string::npos);
  EXPECT_TRUE(h_->Tick().empty());
  EXPECT_EQ(h_->shard().published_version(0), 1u);
  EXPECT_EQ(h_->shard().params(0), before);
  // Nothing was consumed: the same seq, sent well, is queued.
  auto r = h_->Send("a", h_->PushFields(1, 0, 1, 1, n_, 100, 10, kTopK), valid);
  EXPECT_EQ(Only(r, MsgType::PushAck)->header.ack, AckStatus::Queued);
}

}  // namespace
}  // namespace diloco::server::testing
