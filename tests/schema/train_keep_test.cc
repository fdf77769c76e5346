// Cut trains kept and resumed (schema/kept_trains.h, schema/train.h): a push train (or a
// theta(0) upload) whose connection was lost is kept under the push's identity, and the push's next
// send on another connection continues it from the first chunk it lacks; nothing else continues it
// (another payload, a gap, a lie in the header), a kept train goes after its time or beyond the
// byte bound (the oldest first), and chunks that do not hash to the train's checksum never join.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/checksum.h"
#include "schema/train.h"
#include "schema/transport.h"
#include "tests/schema/frames.h"

namespace diloco::wire {
namespace {

using testing::Frames;

const absl::Time kT0 = absl::FromUnixSeconds(1000);

// The three chunks of a push payload of worker 3 (generation 9), fragment 1, `seq`.
struct Train {
  std::vector<std::string> chunks;
  HeaderFields h;

  explicit Train(std::vector<std::string> c, uint64_t seq = 5) : chunks(std::move(c)) {
    h.type = MsgType::Push;
    h.worker_id = 3;
    h.generation = 9;
    h.seq = seq;
    h.fragment_id = 1;
    h.num_elements = 1000;
    h.num_chunks = static_cast<uint32_t>(chunks.size());
    std::vector<uint64_t> sums;
    for (const auto& s : chunks) sums.push_back(Checksum64(s.data(), s.size()));
    h.train_checksum = TrainChecksum(sums);
  }
  // Chunk k as wire::Send sends it, with `edit` applied to its header.
  Message Chunk(uint32_t k, void (*edit)(HeaderFields&) = nullptr) const {
    HeaderFields hk = h;
    hk.chunk_index = k;
    if (edit) edit(hk);
    auto m = ParseMessage(Frames(hk, {chunks[k]}));
    EXPECT_TRUE(m.ok()) << m.status();
    return *std::move(m);
  }
};

const Train kPush({std::string(100, 'a'), std::string(100, 'b'), std::string(50, 'c')});

KeepLimits Limits(uint64_t bytes = 1 << 20) { return {absl::Minutes(5), bytes}; }

std::string Bytes(std::span<const uint8_t> s) { return {s.begin(), s.end()}; }

// Chunks 0 and 1 on connection "old", which is then lost.
void CutAfterTwo(TrainAssembler& t, const Train& train = kPush) {
  for (uint32_t k = 0; k < 2; ++k) {
    auto r = t.Add("old", train.Chunk(k), kT0);
    ASSERT_TRUE(r.ok() && !r->has_value()) << r.status();
  }
  ASSERT_TRUE(t.Keep("old", 3, 9, kT0));
}

TEST(TrainKeepTest, ACutPushTrainResumesOnANewConnectionFromTheChunkItLacks) {
  TrainAssembler t(Limits());
  CutAfterTwo(t);
  EXPECT_EQ(t.partial_trains(), 0u);
  EXPECT_EQ(t.kept().size(), 1u);
  EXPECT_EQ(t.kept().bytes(), 200u);
  const auto held = t.kept().Held(3, 9);
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].fragment_id(), 1u);
  EXPECT_EQ(held[0].chunks(), 2u);
  EXPECT_EQ(held[0].seq(), 5u);
  EXPECT_EQ(held[0].train_checksum(), kPush.h.train_checksum);
  EXPECT_TRUE(t.kept().Held(3, 8).empty()) << "another generation's";
  EXPECT_TRUE(t.kept().Held(4, 9).empty()) << "another worker's";

  auto r = t.Add("new", kPush.Chunk(2), kT0 + absl::Seconds(3));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->has_value());
  const Message& m = **r;
  EXPECT_FALSE(m.is_chunk());
  ASSERT_EQ(m.num_payloads(), 3u);
  for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(Bytes(m.payload(i)), kPush.chunks[i]);
  EXPECT_EQ(t.trains_resumed(), 1u);
  EXPECT_EQ(t.kept().size(), 0u);
  EXPECT_EQ(t.kept().bytes(), 0u);
  EXPECT_EQ(t.kept().taken(), 1u);
}

TEST(TrainKeepTest, OnlyAPushOfTheBoundWorkerWithATrainChecksumIsKept) {
  TrainAssembler off;  // the default keeps nothing: a cut train is dropped as before
  ASSERT_TRUE(off.Add("old", kPush.Chunk(0), kT0).ok());
  EXPECT_FALSE(off.Keep("old", 3, 9, kT0));
  EXPECT_EQ(off.trains_cut(), 1u);
  EXPECT_EQ(ErrorCodeOf(off.Add("new", kPush.Chunk(1), kT0).status()), ErrorCode::TrainNotHeld);

  TrainAssembler t(Limits());
  EXPECT_FALSE(t.Keep("none", 3, 9, kT0)) << "no train on that connection";
  ASSERT_TRUE(t.Add("old", kPush.Chunk(0), kT0).ok());
  EXPECT_FALSE(t.Keep("old", 4, 9, kT0)) << "the connection was another worker's";
  ASSERT_TRUE(t.Add("old", kPush.Chunk(0), kT0).ok());
  EXPECT_FALSE(t.Keep("old", 3, 10, kT0)) << "an older generation's train";
  // An older sender's train declares no train checksum: it cannot be named across connections.
  ASSERT_TRUE(
      t.Add("old", kPush.Chunk(0, [](HeaderFields& h) { h.train_checksum = 0; }), kT0).ok());
  EXPECT_FALSE(t.Keep("old", 3, 9, kT0));
  ASSERT_TRUE(
      t.Add("old", kPush.Chunk(0, [](HeaderFields& h) { h.type = MsgType::FragmentUpdate; }), kT0)
          .ok());
  EXPECT_FALSE(t.Keep("old", 3, 9, kT0)) << "pushes and theta(0) uploads only";
  EXPECT_EQ(t.kept().size(), 0u);
  EXPECT_EQ(t.partial_trains(), 0u);
  // Such a chunk resumes nothing: refused as before (Malformed), not TrainNotHeld.
  EXPECT_EQ(
      ErrorCodeOf(t.Add("new", kPush.Chunk(1, [](HeaderFields& h) { h.train_checksum = 0; }), kT0)
                      .status()),
      ErrorCode::Malformed);
}

// A theta(0) upload (InitFragment, seq 0) is kept and resumed as a push is: a big model's first
// upload over a slow link is the longest train a worker sends.
TEST(TrainKeepTest, ACutThetaZeroUploadIsKeptAndResumed) {
  Train init({std::string(100, 'x'), std::string(100, 'y'), std::string(80, 'z')}, /*seq=*/0);
  init.h.type = MsgType::InitFragment;
  TrainAssembler t(Limits());
  CutAfterTwo(t, init);
  const auto held = t.kept().Held(3, 9);
  ASSERT_EQ(held.size(), 1u);
  EXPECT_EQ(held[0].seq(), 0u);
  EXPECT_EQ(held[0].chunks(), 2u);
  EXPECT_EQ(held[0].train_checksum(), init.h.train_checksum);
  // A push's chunk of the same fragment does not continue it (another type of payload).
  EXPECT_EQ(ErrorCodeOf(t.Add("new", kPush.Chunk(2), kT0).status()), ErrorCode::TrainNotHeld);
  EXPECT_EQ(t.kept().size(), 1u);
  auto r = t.Add("new", init.Chunk(2), kT0 + absl::Seconds(1));
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_TRUE(r->has_value());
  EXPECT_EQ((*r)->header().type(), MsgType::InitFragment);
  ASSERT_EQ((*r)->num_payloads(), 3u);
  for (uint32_t i = 0; i < 3; ++i) EXPECT_EQ(Bytes((*r)->payload(i)), init.chunks[i]);
  EXPECT_EQ(t.trains_resumed(), 1u);
  EXPECT_EQ(t.kept().size(), 0u);
}

// Whatever does not continue the kept train exactly is refused TrainNotHeld and leaves it as it
// was: the right chunk still resumes it afterwards.
TEST(TrainKeepTest, AChunkThatDoesNotContinueTheKeptTrainIsRefusedAndChangesNothing) {
  TrainAssembler t(Limits());
  CutAfterTwo(t);
  const Train other({std::string(100, 'a'), std::string(100, 'b'), std::string(50, 'X')});
  std::vector<std::pair<const char*, Message>> refused;
  refused.emplace_back("a gap", kPush.Chunk(1));
  refused.emplace_back("another payload", other.Chunk(2));
  refused.emplace_back("another seq", Train(kPush.chunks, 6).Chunk(2));
  refused.emplace_back("tokens differ", kPush.Chunk(2, [](HeaderFields& h) { h.tokens = 7; }));
  refused.emplace_back("base differs", kPush.Chunk(2, [](HeaderFields& h) { h.base_version = 4; }));
  refused.emplace_back("size differs",
                       kPush.Chunk(2, [](HeaderFields& h) { h.num_elements = 999; }));
  refused.emplace_back("another generation",
                       kPush.Chunk(2, [](HeaderFields& h) { h.generation = 8; }));
  refused.emplace_back("another fragment",
                       kPush.Chunk(2, [](HeaderFields& h) { h.fragment_id = 2; }));
  for (auto& [why, chunk] : refused) {
    auto r = t.Add("new", std::move(chunk), kT0);
    EXPECT_EQ(ErrorCodeOf(r.status()), ErrorCode::TrainNotHeld) << why;
    EXPECT_EQ(t.partial_trains(), 0u) << why;
    EXPECT_EQ(t.kept().size(), 1u) << why;
  }
  auto r = t.Add("new", kPush.Chunk(2), kT0);
  ASSERT_TRUE(r.ok() && r->has_value()) << r.status();
  EXPECT_EQ((*r)->num_payloads(), 3u);
}

// Chunks that each pass their own checksum but are not the payload the train names (a lie in a
// resumed chunk's header) never come out joined.
TEST(TrainKeepTest, ChunksThatDoNotHashToTheTrainChecksumAreRefused) {
  TrainAssembler t(Limits());
  CutAfterTwo(t);
  const Train other({std::string(100, 'a'), std::string(100, 'b'), std::string(50, 'X')});
  auto lie = other.Chunk(2, [](HeaderFields& h) { h.train_checksum = kPush.h.train_checksum; });
  EXPECT_EQ(ErrorCodeOf(t.Add("new", std::move(lie), kT0).status()), ErrorCode::BadChecksum);
  EXPECT_EQ(t.partial_trains(), 0u);
  EXPECT_EQ(t.kept().size(), 0u) << "taken, then found to be another payload";
  // On one connection too: a train whose checksum is not its chunks'.
  TrainAssembler u;
  for (uint32_t k = 0; k < 3; ++k) {
    auto c = (k < 2 ? kPush : other).Chunk(k, [](HeaderFields& h) {
      h.train_checksum = kPush.h.train_checksum;
    });
    auto s = u.Add("c", std::move(c), kT0);
    if (k < 2) {
      ASSERT_TRUE(s.ok()) << s.status();
    } else {
      EXPECT_EQ(ErrorCodeOf(s.status()), ErrorCode::BadChecksum);
    }
  }
}

TEST(TrainKeepTest, AKeptTrainExpiresAfterItsTime) {
  TrainAssembler t(Limits());
  CutAfterTwo(t);
  EXPECT_EQ(t.kept().Expire(kT0 + absl::Minutes(5)), 0u);
  EXPECT_EQ(t.kept().Expire(kT0 + absl::Minutes(5) + absl::Seconds(1)), 1u);
  EXPECT_EQ(t.kept().expired(), 1u);
  EXPECT_EQ(t.kept().bytes(), 0u);
  EXPECT_EQ(ErrorCodeOf(t.Add("new", kPush.Chunk(2), kT0).status()), ErrorCode::TrainNotHeld);
}

TEST(TrainKeepTest, BeyondTheByteBoundTheOldestKeptTrainIsDropped) {
  TrainAssembler t(Limits(/*bytes=*/300));
  CutAfterTwo(t);  // 200 bytes, worker 3
  Train second(kPush.chunks);
  second.h.worker_id = 4;
  ASSERT_TRUE(t.Add("w4", second.Chunk(0), kT0 + absl::Seconds(1)).ok());
  ASSERT_TRUE(t.Add("w4", second.Chunk(1), kT0 + absl::Seconds(1)).ok());
  ASSERT_TRUE(t.Keep("w4", 4, 9, kT0 + absl::Seconds(1)));  // 400 bytes: worker 3's goes
  EXPECT_EQ(t.kept().size(), 1u);
  EXPECT_EQ(t.kept().bytes(), 200u);
  EXPECT_EQ(t.kept().evicted(), 1u);
  EXPECT_TRUE(t.kept().Held(3, 9).empty());
  EXPECT_EQ(t.kept().Held(4, 9).size(), 1u);
  // A train larger than the whole bound is not kept at all.
  TrainAssembler small(Limits(/*bytes=*/150));
  ASSERT_TRUE(small.Add("old", kPush.Chunk(0), kT0).ok());
  ASSERT_TRUE(small.Add("old", kPush.Chunk(1), kT0).ok());
  EXPECT_FALSE(small.Keep("old", 3, 9, kT0));
  EXPECT_EQ(small.kept().size(), 0u);
  EXPECT_EQ(small.kept().bytes(), 0u);
}

TEST(TrainKeepTest, ANewSendOfThePushSupersedesItsKeptTrain) {
  TrainAssembler t(Limits());
  CutAfterTwo(t);
  ASSERT_TRUE(t.Add("new", kPush.Chunk(0), kT0).ok());  // sent whole again
  EXPECT_EQ(t.kept().size(), 0u);
  EXPECT_EQ(t.kept().bytes(), 0u);
  // A second cut keeps the newer train in place of the older.
  ASSERT_TRUE(t.Keep("new", 3, 9, kT0));
  EXPECT_EQ(t.kept().Held(3, 9).at(0).chunks(), 1u);
  ASSERT_TRUE(t.Add("newer", kPush.Chunk(0), kT0).ok());
  ASSERT_TRUE(t.Add("newer", kPush.Chunk(1), kT0).ok());
  ASSERT_TRUE(t.Keep("newer", 3, 9, kT0));
  EXPECT_EQ(t.kept().size(), 1u);
  EXPECT_EQ(t.kept().Held(3, 9).at(0).chunks(), 2u);
  EXPECT_EQ(t.kept().bytes(), 200u);
}

// Over a real socket pair: a send resumed at chunk 1 puts only chunks 1.. on the wire, each
// declaring the train checksum of the whole payload.
TEST(TrainKeepTest, SendResumedAtAChunkSendsOnlyTheChunksFromIt) {
  zmq::context_t ctx(1);
  zmq::socket_t router(ctx, zmq::socket_type::router), dealer(ctx, zmq::socket_type::dealer);
  router.bind("tcp://127.0.0.1:*");
  dealer.connect(router.get(zmq::sockopt::last_endpoint));
  std::vector<zmq::message_t> frames;
  for (const auto& c : kPush.chunks) frames.emplace_back(c.data(), c.size());
  HeaderFields h = kPush.h;
  h.num_chunks = 0;
  h.train_checksum = 0;  // Send sets both
  h.chunk_index = 1;
  ASSERT_TRUE(Send(dealer, h, std::move(frames), nullptr, false).ok());
  for (uint32_t k = 1; k < 3; ++k) {
    zmq::pollitem_t item{static_cast<void*>(router), 0, ZMQ_POLLIN, 0};
    ASSERT_EQ(zmq::poll(&item, 1, std::chrono::seconds(5)), 1) << "nothing arrived";
    auto f = TryRecvMultipart(router);
    ASSERT_TRUE(f.has_value());
    f->erase(f->begin());
    auto m = ParseMessage(std::move(*f));
    ASSERT_TRUE(m.ok()) << m.status();
    EXPECT_EQ(m->header().chunk_index(), k);
    EXPECT_EQ(m->header().num_chunks(), 3u);
    EXPECT_EQ(m->header().train_checksum(), kPush.h.train_checksum);
    EXPECT_EQ(Bytes(m->payload(0)), kPush.chunks[k]);
  }
  EXPECT_FALSE(TryRecvMultipart(router).has_value()) << "chunk 0 was sent";
  std::vector<zmq::message_t> two;
  two.emplace_back(3);
  two.emplace_back(3);
  h.chunk_index = 2;
  EXPECT_FALSE(Send(dealer, h, std::move(two), nullptr, false).ok()) << "past the last chunk";
}

}  // namespace
}  // namespace diloco::wire
