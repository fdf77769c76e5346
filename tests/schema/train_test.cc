// Payload trains (schema/train.h): wire::Send cuts a payload of several chunks into one message
// per chunk, TrainAssembler joins them back without copying, and everything that does not
// continue a train in order with the same header is refused and leaves nothing behind. The
// shard takes a pushed train like a whole message and refuses a broken one without a change.
#include "schema/train.h"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "schema/transport.h"
#include "tests/schema/frames.h"
#include "tests/server/shard_harness.h"

namespace diloco::wire {
namespace {

HeaderFields PushFields(uint32_t chunks = 0, uint32_t index = 0) {
  HeaderFields h;
  h.type = MsgType::Push;
  h.worker_id = 3;
  h.generation = 9;
  h.seq = 5;
  h.fragment_id = 1;
  h.num_elements = 1000;
  h.num_chunks = chunks;
  h.chunk_index = index;
  return h;
}

using testing::Frames;

Message Parsed(const HeaderFields& h, std::vector<std::string> payloads) {
  auto m = ParseMessage(Frames(h, std::move(payloads)));
  EXPECT_TRUE(m.ok()) << m.status();
  return *std::move(m);
}

std::string Bytes(std::span<const uint8_t> s) { return {s.begin(), s.end()}; }

TEST(TrainTest, ParseRefusesAChunkOutsideItsTrainOrWithSeveralFrames) {
  EXPECT_EQ(ErrorCodeOf(ParseMessage(Frames(PushFields(3, 3), {"a"})).status()),
            ErrorCode::Malformed);
  EXPECT_EQ(ErrorCodeOf(ParseMessage(Frames(PushFields(0, 1), {"a"})).status()),
            ErrorCode::Malformed);
  EXPECT_EQ(ErrorCodeOf(ParseMessage(Frames(PushFields(3, 0), {"a", "b"})).status()),
            ErrorCode::Malformed);
  EXPECT_EQ(ErrorCodeOf(ParseMessage(Frames(PushFields(5000, 0), {"a"})).status()),
            ErrorCode::Malformed);
  auto m = ParseMessage(Frames(PushFields(3, 2), {"a"}));
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_TRUE(m->is_chunk());
}

TEST(TrainTest, ChunksInOrderJoinIntoOneMessageWithoutCopies) {
  TrainAssembler t;
  const absl::Time now = absl::Now();
  std::vector<const void*> data;
  for (uint32_t k = 0; k < 3; ++k) {
    Message c = Parsed(PushFields(3, k), {std::string(100 + k, static_cast<char>('a' + k))});
    data.push_back(c.payload(0).data());
    auto r = t.Add("conn", std::move(c), now);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_EQ(r->has_value(), k == 2);
    if (k < 2) continue;
    const Message& m = **r;
    EXPECT_FALSE(m.is_chunk());
    EXPECT_EQ(m.header().seq(), 5u);
    ASSERT_EQ(m.num_payloads(), 3u);
    for (uint32_t i = 0; i < 3; ++i) {
      EXPECT_EQ(Bytes(m.payload(i)), std::string(100 + i, static_cast<char>('a' + i)));
      EXPECT_EQ(static_cast<const void*>(m.payload(i).data()), data[i]) << "copied chunk " << i;
    }
  }
  EXPECT_EQ(t.partial_trains(), 0u);
  EXPECT_EQ(t.trains_cut(), 0u);
}

TEST(TrainTest, AWholeMessagePassesStraightThroughAndEndsACutTrain) {
  TrainAssembler t;
  ASSERT_TRUE(t.Add("conn", Parsed(PushFields(3, 0), {"a"}), absl::Now()).ok());
  auto r = t.Add("conn", Parsed(PushFields(), {"x", "yz"}), absl::Now());
  ASSERT_TRUE(r.ok() && r->has_value());
  EXPECT_EQ((*r)->num_payloads(), 2u);
  EXPECT_EQ(t.partial_trains(), 0u);
  EXPECT_EQ(t.trains_cut(), 1u);
  // The cut train's next chunk is refused, not joined.
  EXPECT_EQ(ErrorCodeOf(t.Add("conn", Parsed(PushFields(3, 1), {"b"}), absl::Now()).status()),
            ErrorCode::Malformed);
}

TEST(TrainTest, AGapAnotherPushOrADifferentFieldIsRefusedAndDropsThePartialTrain) {
  const absl::Time now = absl::Now();
  for (int variant = 0; variant < 4; ++variant) {
    TrainAssembler t;
    ASSERT_TRUE(t.Add("c", Parsed(PushFields(3, 0), {"a"}), now).ok());
    HeaderFields next = PushFields(3, 1);
    if (variant == 0) next.chunk_index = 2;  // a gap
    if (variant == 1) next.chunk_index = 0;  // handled below: a restart, not an error
    if (variant == 2) next.seq = 6;          // another push
    if (variant == 3) next.num_elements = 999;
    auto r = t.Add("c", Parsed(next, {"b"}), now);
    if (variant == 1) {
      ASSERT_TRUE(r.ok());
      EXPECT_FALSE(r->has_value());
      EXPECT_EQ(t.partial_trains(), 1u);  // the new train
      EXPECT_EQ(t.trains_cut(), 1u);      // the old one, cut short
      continue;
    }
    EXPECT_EQ(ErrorCodeOf(r.status()), ErrorCode::Malformed) << variant;
    EXPECT_EQ(t.partial_trains(), 0u) << variant;
    EXPECT_EQ(t.partial_bytes(), 0u) << variant;
    // The rest of the broken train is refused too, not mistaken for a new one.
    EXPECT_EQ(ErrorCodeOf(t.Add("c", Parsed(PushFields(3, 2), {"c"}), now).status()),
              ErrorCode::Malformed);
  }
}

TEST(TrainTest, ConnectionsAssembleIndependently) {
  TrainAssembler t;
  const absl::Time now = absl::Now();
  ASSERT_TRUE(t.Add("x", Parsed(PushFields(2, 0), {"x0"}), now).ok());
  HeaderFields other = PushFields(2, 0);
  other.worker_id = 4;
  ASSERT_TRUE(t.Add("y", Parsed(other, {"y0"}), now).ok());
  EXPECT_EQ(t.partial_trains(), 2u);
  EXPECT_EQ(t.partial_bytes(), 4u);
  other.chunk_index = 1;
  auto y = t.Add("y", Parsed(other, {"y1"}), now);
  auto x = t.Add("x", Parsed(PushFields(2, 1), {"x1"}), now);
  ASSERT_TRUE(x.ok() && x->has_value() && y.ok() && y->has_value());
  EXPECT_EQ(Bytes((*x)->payload(1)), "x1");
  EXPECT_EQ(Bytes((*y)->payload(0)), "y0");
  EXPECT_EQ((*y)->header().worker_id(), 4u);
}

TEST(TrainTest, IdlePartialTrainsAreDropped) {
  TrainAssembler t;
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(t.Add("old", Parsed(PushFields(2, 0), {"a"}), t0).ok());
  ASSERT_TRUE(t.Add("new", Parsed(PushFields(2, 0), {"a"}), t0 + absl::Minutes(10)).ok());
  EXPECT_EQ(t.DropIdleSince(t0 + absl::Minutes(5)), 1u);
  EXPECT_EQ(t.partial_trains(), 1u);
  EXPECT_EQ(ErrorCodeOf(t.Add("old", Parsed(PushFields(2, 1), {"b"}), t0).status()),
            ErrorCode::Malformed);
}

// A payload's chunk frames point into its buffer (no copy), sized as the codec encodes each
// chunk; the layout fields say the same.
TEST(TrainTest, PayloadFramesCutABufferAsTheLayoutSays) {
  const kernels::Codec int8{kernels::CodecKind::kInt8, 256};
  const uint64_t chunk = ChunkElements(int8.block), numel = 2 * chunk + 1000;
  const size_t total = 2 * kernels::EncodedBytes(int8, chunk) + kernels::EncodedBytes(int8, 1000);
  auto buf = std::make_shared<wire::Bytes>(total);
  const auto frames = PayloadFrames(buf, int8, numel);
  ASSERT_EQ(frames.size(), 3u);
  EXPECT_EQ(frames[0].data(), buf->data());
  EXPECT_EQ(frames[1].data(), buf->data() + frames[0].size());
  EXPECT_EQ(frames[2].size(), kernels::EncodedBytes(int8, 1000));
  EXPECT_EQ(frames[0].size() + frames[1].size() + frames[2].size(), total);
  HeaderFields h;
  SetPayloadLayout(h, int8, numel);
  EXPECT_EQ(h.codec, static_cast<uint8_t>(kernels::CodecKind::kInt8));
  EXPECT_EQ(h.block, 256u);
  EXPECT_EQ(h.num_elements, numel);
  EXPECT_EQ(h.chunk_elements, chunk);
}

// Over a real socket pair: Send puts one message per payload frame on the wire, each verifiable
// alone, and the receiver's assembler gives back the payload as sent.
TEST(TrainTest, SendCutsSeveralFramesIntoATrainThatJoinsBack) {
  zmq::context_t ctx(1);
  zmq::socket_t router(ctx, zmq::socket_type::router), dealer(ctx, zmq::socket_type::dealer);
  router.bind("tcp://127.0.0.1:*");
  dealer.connect(router.get(zmq::sockopt::last_endpoint));
  std::vector<std::string> payloads = {std::string(3 << 20, 'p'), std::string(1000, 'q'),
                                       std::string(5, 'r')};
  std::vector<zmq::message_t> frames;
  for (const auto& p : payloads) frames.emplace_back(p.data(), p.size());
  ASSERT_TRUE(Send(dealer, PushFields(), std::move(frames), nullptr, false).ok());
  ASSERT_TRUE(Send(dealer, PushFields(), {}, nullptr, false).ok());  // no payload: one message
  TrainAssembler t;
  std::vector<Message> whole;
  int messages = 0;
  while (whole.size() < 2) {
    zmq::pollitem_t item{static_cast<void*>(router), 0, ZMQ_POLLIN, 0};
    ASSERT_EQ(zmq::poll(&item, 1, std::chrono::seconds(5)), 1) << "nothing arrived";
    auto f = TryRecvMultipart(router);
    ASSERT_TRUE(f.has_value());
    ASSERT_LE(f->size(), 3u) << "routing id, header and at most one frame per message";
    std::string rid(static_cast<const char*>((*f)[0].data()), (*f)[0].size());
    f->erase(f->begin());
    auto m = ParseMessage(std::move(*f));
    ASSERT_TRUE(m.ok()) << m.status();
    ++messages;
    auto r = t.Add(rid, *std::move(m), absl::Now());
    ASSERT_TRUE(r.ok()) << r.status();
    if (r->has_value()) whole.push_back(**std::move(r));
  }
  EXPECT_EQ(messages, 4);
  ASSERT_EQ(whole[0].num_payloads(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(Bytes(whole[0].payload(i)), payloads[i]);
  EXPECT_EQ(whole[1].num_payloads(), 0u);
}

}  // namespace
}  // namespace diloco::wire

namespace diloco::server::testing {
namespace {

using wire::AckStatus;
using wire::ErrorCode;
using wire::MsgType;

// A fragment of two chunks (more than ChunkElements(256) ~ 1 Mi elements): its pushes travel as
// trains of two messages.
class ShardTrainTest : public ::testing::Test {
 protected:
  ShardTrainTest() : h_(Options()) {}
  static ShardOptions Options() {
    auto o = TinyOptions(1);
    o.manifest = GptManifest(GptConfig{256, 64, 1, 4, 384}).value();  // ~1.9M parameters
    return o;
  }
  void SetUp() override {
    n_ = h_.fragment(0).numel;
    ASSERT_GT(n_, wire::ChunkElements(256));
    h_.Hello("a", 1);
    ASSERT_EQ(Only(h_.Init("a", 1, 0, std::vector<float>(n_, 1.0f)), MsgType::PushAck)->header.ack,
              AckStatus::Initialized);
  }
  // The two messages of a push of `delta` (fp32), as wire::Send would cut them.
  std::vector<std::vector<zmq::message_t>> PushTrain(float delta) {
    auto hf = h_.PushFields(1, 0, 1, 1, n_);
    auto chunks = ShardHarness::Encode(wire::kFragmentCodec, std::vector<float>(n_, delta));
    std::vector<std::vector<zmq::message_t>> out;
    hf.num_chunks = static_cast<uint32_t>(chunks.size());
    for (uint32_t k = 0; k < chunks.size(); ++k) {
      hf.chunk_index = k;
      out.push_back(ShardHarness::Frames(hf, {chunks[k]}));
    }
    return out;
  }
  ShardHarness h_;
  uint64_t n_ = 0;
};

TEST_F(ShardTrainTest, APushTrainIsTakenWhole) {
  auto train = PushTrain(0.5f);
  ASSERT_EQ(train.size(), 2u);
  EXPECT_TRUE(h_.SendRaw("a", std::move(train[0])).empty());  // nothing until it is whole
  auto out = h_.SendRaw("a", std::move(train[1]));
  EXPECT_EQ(Only(out, MsgType::PushAck)->header.ack, AckStatus::Queued);
  h_.clock().Advance(absl::Seconds(6));
  EXPECT_EQ(Only(h_.Tick(), MsgType::FragmentUpdate)->header.version, 2u);
  const auto p = h_.shard().params(0);
  EXPECT_NE(p.front(), 1.0f);
  EXPECT_EQ(p.front(), p.back());  // both chunks applied alike
}

TEST_F(ShardTrainTest, ABrokenTrainIsRefusedAndChangesNothing) {
  const auto before = h_.shard().params(0);
  // A corrupt second chunk: refused by its checksum, naming the push.
  auto train = PushTrain(0.5f);
  static_cast<uint8_t*>(train[1][1].data())[7] ^= 0x40;
  EXPECT_TRUE(h_.SendRaw("a", std::move(train[0])).empty());
  auto out = h_.SendRaw("a", std::move(train[1]));
  EXPECT_EQ(Only(out, MsgType::Error)->header.error_code, ErrorCode::BadChecksum);
  // A second chunk without its first.
  train = PushTrain(0.5f);
  out = h_.SendRaw("a", std::move(train[1]));
  const Outgoing* e = Only(out, MsgType::Error);
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->header.error_code, ErrorCode::Malformed);
  EXPECT_EQ(e->header.seq, 1u);
  EXPECT_EQ(e->header.fragment_id, 0u);
  h_.clock().Advance(absl::Seconds(6));
  EXPECT_TRUE(h_.Tick().empty());
  EXPECT_EQ(h_.shard().params(0), before);
  EXPECT_EQ(h_.shard().counters().pushes_queued, 0u);
  // The sender's next, intact train goes through.
  train = PushTrain(0.5f);
  h_.SendRaw("a", std::move(train[0]));
  EXPECT_EQ(Only(h_.SendRaw("a", std::move(train[1])), MsgType::PushAck)->header.ack,
            AckStatus::Queued);
}

}  // namespace
}  // namespace diloco::server::testing
