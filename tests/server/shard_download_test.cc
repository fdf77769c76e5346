// Quantized downloads end to end on one shard (fake clock, no sockets): what a worker rebuilds
// from each FragmentUpdate (worker/fragment_update.h) is the shard's published values to the
// bit, with the checksum the shard sent; workers a few versions behind get the chain, further
// behind, pulling or joining the whole fragment; the residual keeps the published values within
// one grid step of the outer optimizer's; and the chain's own rules (server/download_chain.h).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "common/checksum.h"
#include "server/download_chain.h"
#include "tests/server/shard_harness.h"
#include "worker/fragment_update.h"

namespace diloco::server::testing {
namespace {

using wire::AckStatus;
using wire::MsgType;

constexpr kernels::Codec kInt8{kernels::CodecKind::kInt8, 64};

std::vector<float> Random(size_t n, float scale, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// An Outgoing as the worker receives it.
wire::Message Received(const Outgoing& o) {
  std::vector<zmq::message_t> frames;
  frames.push_back(wire::BuildHeader(o.header, o.payloads));
  for (const auto& p : o.payloads) frames.emplace_back(p.data(), p.size());
  auto m = wire::ParseMessage(std::move(frames));
  EXPECT_TRUE(m.ok()) << m.status();
  return *std::move(m);
}

// A worker's copy of one fragment: the values of `version`, updated from FragmentUpdates as the
// sync client does.
struct Mirror {
  std::vector<float> values;
  uint64_t version = 0;

  // Adopts `o`; returns the checksum the rebuild produced (0 for a whole fragment).
  uint64_t Take(const Outgoing& o) {
    const wire::Message m = Received(o);
    EXPECT_TRUE(worker::CheckFragmentUpdate(m, values.size()).ok());
    std::vector<float> next(values.size()), scratch;
    auto sum = worker::ReadFragmentUpdate(
        m, version, scratch,
        [&](uint64_t pos, std::span<float> out) {
          std::memcpy(out.data(), values.data() + pos, out.size_bytes());
        },
        [&](uint64_t pos, std::span<const float> v) {
          std::memcpy(next.data() + pos, v.data(), v.size_bytes());
        });
    EXPECT_TRUE(sum.ok()) << sum.status();
    values = std::move(next);
    version = o.header.version;
    return sum.ok() ? *sum : 0;
  }
};

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class ShardDownloadTest : public ::testing::Test {
 protected:
  void SetUpShard(kernels::Codec download, uint32_t quorum = 2) {
    auto o = TinyOptions(/*fragments=*/1);
    o.round.quorum = quorum;
    o.download = download;
    h_ = std::make_unique<ShardHarness>(o);
    n_ = h_->fragment(0).numel;
    h_->Hello("a", 1);
    h_->Hello("b", 2);
    const auto theta0 = Random(n_, 1.0f, 7);
    ASSERT_EQ(Only(h_->Init("a", 1, 0, theta0), MsgType::PushAck)->header.ack,
              AckStatus::Initialized);
    a_ = b_ = Mirror{theta0, 1};
  }
  // Both workers push (on the versions they hold) and the round closes: the Applied updates.
  std::vector<Outgoing> Round(uint64_t seq, uint32_t seed) {
    h_->Push("a", 1, 0, seq, a_.version, Random(n_, 0.01f, seed));
    h_->Push("b", 2, 0, seq, b_.version, Random(n_, 0.01f, seed + 1));
    return h_->Tick();
  }
  const Outgoing* To(const std::vector<Outgoing>& out, const std::string& rid) {
    for (const auto& o : out)
      if (o.routing_id == rid && o.header.type == MsgType::FragmentUpdate) return &o;
    ADD_FAILURE() << "no FragmentUpdate to " << rid;
    return nullptr;
  }
  std::unique_ptr<ShardHarness> h_;
  uint64_t n_ = 0;
  Mirror a_, b_;
};

TEST_F(ShardDownloadTest, WorkersRebuildThePublishedValuesBitForBit) {
  // Top-k: 16 of each block of 64 kept, the rest left in the shard's (fp32) residual.
  for (kernels::Codec c : {kInt8, kernels::Codec{kernels::CodecKind::kInt4, 64},
                           kernels::Codec{kernels::CodecKind::kTopK, 64, 16}}) {
    SCOPED_TRACE(kernels::CodecName(c));
    SetUpShard(c);
    for (uint64_t r = 1; r <= 5; ++r) {
      const auto out = Round(r, static_cast<uint32_t>(10 * r));
      for (auto [rid, mirror] : {std::pair{"a", &a_}, std::pair{"b", &b_}}) {
        const Outgoing* u = To(out, rid);
        ASSERT_NE(u, nullptr);
        EXPECT_EQ(u->header.codec, static_cast<uint8_t>(c.kind));
        EXPECT_EQ(u->header.base_version, r);
        const uint64_t sum = mirror->Take(*u);
        EXPECT_EQ(sum, u->header.values_checksum);
        // What the audit log digests: the published values' chunk checksums, not the update's.
        ASSERT_NE(u->values_checksums, nullptr);
        EXPECT_EQ(*u->values_checksums, *h_->shard().published_checksums(0));
        EXPECT_TRUE(SameBits(mirror->values, h_->shard().params(0))) << "round " << r;
      }
    }
    const auto& c8 = h_->shard().counters();
    EXPECT_EQ(c8.updates_delta, 10u);
    EXPECT_EQ(c8.updates_full, 0u);
    // One update per worker per round: about 1 + 4/64 bytes per value for int8, half for int4,
    // for top-k a 64-bit bitmap, 16 2-bit codes and two 4-byte magnitudes per 64 values (0.31).
    const double per_value = static_cast<double>(c8.update_bytes_delta) / (10.0 * n_);
    const double bound = c.kind == kernels::CodecKind::kInt8   ? 1.1
                         : c.kind == kernels::CodecKind::kInt4 ? 0.6
                                                               : 0.35;
    EXPECT_LT(per_value, bound);
  }
}

TEST_F(ShardDownloadTest, AWorkerBehindGetsTheChainThenTheWholeFragment) {
  SetUpShard(kInt8, /*quorum=*/1);
  // Worker a alone moves the fragment to version 4 (b silent past the worker timeout, so a's
  // rounds close at once); b still holds version 1.
  h_->clock().Advance(absl::Seconds(11));
  for (uint64_t seq = 1; seq <= 3; ++seq) {
    h_->Push("a", 1, 0, seq, a_.version, Random(n_, 0.01f, static_cast<uint32_t>(seq)));
    const auto out = h_->Tick();
    const Outgoing* u = To(out, "a");
    ASSERT_NE(u, nullptr);
    a_.Take(*u);
  }
  ASSERT_EQ(a_.version, 4u);
  // b pushes on version 1: its round makes version 5, four updates from what b holds: more
  // than the whole fragment (4 x 1.06 bytes against 4 per value): sent whole.
  h_->Push("b", 2, 0, 1, b_.version, Random(n_, 0.01f, 99));
  h_->clock().Advance(absl::Seconds(6));  // a is live and missing: the round closes at the cap
  const auto out_b = h_->Tick();
  const Outgoing* whole = To(out_b, "b");
  ASSERT_NE(whole, nullptr);
  EXPECT_EQ(whole->header.codec, static_cast<uint8_t>(kernels::CodecKind::kFp32));
  b_.Take(*whole);
  EXPECT_TRUE(SameBits(b_.values, h_->shard().params(0)));
  // a, at version 4, pushes into version 6: the chain 5, 6.
  h_->Push("a", 1, 0, 4, a_.version, Random(n_, 0.01f, 100));
  h_->clock().Advance(absl::Seconds(6));
  const auto out_a = h_->Tick();
  const Outgoing* chain = To(out_a, "a");
  ASSERT_NE(chain, nullptr);
  EXPECT_EQ(chain->header.base_version, 4u);
  EXPECT_EQ(chain->header.version, 6u);
  EXPECT_EQ(chain->payloads.size(), 2u);  // one chunk per update at this size
  EXPECT_EQ(a_.Take(*chain), chain->header.values_checksum);
  EXPECT_TRUE(SameBits(a_.values, h_->shard().params(0)));
}

TEST_F(ShardDownloadTest, PullsAreAnsweredWithTheWholeFragment) {
  SetUpShard(kInt8);
  Round(1, 5);
  auto pull = h_->Base(MsgType::Pull, 2);
  pull.fragment_id = 0;
  const auto out = h_->Send("b", pull);
  const Outgoing* u = Only(out, MsgType::FragmentUpdate);
  ASSERT_NE(u, nullptr);
  EXPECT_EQ(u->header.codec, static_cast<uint8_t>(kernels::CodecKind::kFp32));
  Mirror fresh{std::vector<float>(n_), 0};
  fresh.Take(*u);
  EXPECT_TRUE(SameBits(fresh.values, h_->shard().params(0)));
}

// The outer optimizer's trajectory does not depend on what is published (momentum and theta's
// steps come from the pushes), so a shard with fp32 downloads fed the same pushes shows it; the
// published values stay within a grid step of it however many rounds go by, because the
// residual carries what each update's quantization left out.
TEST_F(ShardDownloadTest, PublishedValuesTrackTheOuterOptimizer) {
  SetUpShard(kInt8);
  auto o = TinyOptions(1);
  o.round.quorum = 2;
  ShardHarness exact(o);
  exact.Hello("a", 1);
  exact.Hello("b", 2);
  exact.Init("a", 1, 0, a_.values);
  double worst = 0, largest_step = 0;
  std::vector<float> before = exact.shard().params(0);
  for (uint64_t r = 1; r <= 30; ++r) {
    const auto da = Random(n_, 0.01f, static_cast<uint32_t>(3 * r));
    const auto db = Random(n_, 0.01f, static_cast<uint32_t>(3 * r + 1));
    h_->Push("a", 1, 0, r, r, da);
    h_->Push("b", 2, 0, r, r, db);
    h_->Tick();
    exact.Push("a", 1, 0, r, r, da);
    exact.Push("b", 2, 0, r, r, db);
    exact.Tick();
    const auto p = h_->shard().params(0), t = exact.shard().params(0);
    for (size_t i = 0; i < n_; ++i) {
      worst = std::max(worst, std::fabs(static_cast<double>(p[i]) - t[i]));
      largest_step = std::max(largest_step, std::fabs(static_cast<double>(t[i]) - before[i]));
    }
    before = t;
  }
  // Half an int8 grid step of the largest update is largest_step / 254; the residual's own int4
  // encoding loses under 1/14 of that a version. Without the residual the error would grow with
  // the rounds.
  EXPECT_GT(worst, 0.0);
  EXPECT_LT(worst, largest_step / 254 * 1.5);
}

TEST(DownloadChainTest, ANonFiniteStepIsPublishedWholeAndStartsAFreshChain) {
  const uint64_t n = 1000;
  DownloadChain chain(kInt8, n);
  std::vector<float> prev(n, 1.0f), theta(n, 1.5f), scratch;
  ASSERT_TRUE(chain.Quantize(2, prev, theta, scratch));
  EXPECT_EQ(chain.Between(1, 2).size(), 1u);
  std::vector<float> bad = theta;
  bad[17] = std::nanf("");
  EXPECT_FALSE(chain.Quantize(3, theta, bad, scratch));
  EXPECT_EQ(chain.size(), 0u);
  EXPECT_TRUE(chain.Between(2, 3).empty());
  std::vector<float> next(n, 2.0f);
  ASSERT_TRUE(chain.Quantize(4, theta, next, scratch));
  EXPECT_TRUE(chain.Between(2, 4).empty());  // version 3 has no update
  EXPECT_EQ(chain.Between(3, 4).size(), 1u);
}

TEST(DownloadChainTest, BetweenAndTrim) {
  const uint64_t n = 5000;
  DownloadChain chain(kInt8, n);
  std::vector<float> p(n, 0.0f), scratch;
  for (uint64_t v = 2; v <= 6; ++v) {
    std::vector<float> next = Random(n, 1.0f, static_cast<uint32_t>(v));
    ASSERT_TRUE(chain.Quantize(v, p, next, scratch));
    p = next;
  }
  EXPECT_EQ(chain.size(), 5u);
  EXPECT_EQ(chain.Between(5, 6).size(), 1u);
  EXPECT_EQ(chain.Between(3, 6).size(), 3u);
  EXPECT_TRUE(chain.Between(2, 6).empty());  // 4 updates of 1.06 bytes: the whole one is smaller
  EXPECT_TRUE(chain.Between(0, 6).empty());
  EXPECT_TRUE(chain.Between(6, 6).empty());
  EXPECT_TRUE(chain.Between(5, 7).empty());  // no such version yet
  EXPECT_EQ(chain.Between(4, 5).front()->version, 5u);
  chain.Trim(/*oldest_base=*/4, /*max_updates=*/8);  // everyone holds 4 or newer
  EXPECT_EQ(chain.size(), 2u);
  EXPECT_TRUE(chain.Between(3, 5).empty());
  chain.Trim(0, 1);
  EXPECT_EQ(chain.size(), 1u);
  // One update and the int4 residual: two values a byte, a 4-byte scale per block of 64.
  EXPECT_EQ(chain.bytes(), chain.update_bytes() + (n / 2 + (n + 63) / 64 * 4));
}

TEST(FragmentUpdateTest, MalformedChainsAreRefusedBeforeAnyValueIsRead) {
  const uint64_t n = 300;
  wire::HeaderFields h;
  h.type = MsgType::FragmentUpdate;
  wire::SetPayloadLayout(h, kInt8, n);
  h.base_version = 3;
  h.version = 5;
  std::vector<float> values = Random(n, 1.0f, 1);
  std::vector<uint8_t> one(kernels::EncodedSize(kInt8, n));
  ASSERT_TRUE(kernels::Encode(kInt8, values, one).ok());
  auto message = [&](const wire::HeaderFields& hf, std::vector<std::vector<uint8_t>> payloads) {
    auto m = wire::ParseMessage(ShardHarness::Frames(hf, payloads));
    EXPECT_TRUE(m.ok()) << m.status();
    return *std::move(m);
  };
  EXPECT_TRUE(worker::CheckFragmentUpdate(message(h, {one, one}), n).ok());
  EXPECT_FALSE(worker::CheckFragmentUpdate(message(h, {one}), n).ok());  // 2 updates, 1 sent
  auto bad_scale = one;
  const float inf = INFINITY;
  std::memcpy(bad_scale.data(), &inf, 4);
  EXPECT_FALSE(worker::CheckFragmentUpdate(message(h, {one, bad_scale}), n).ok());
  auto no_base = h;
  no_base.base_version = 0;
  no_base.version = 2;
  EXPECT_FALSE(worker::CheckFragmentUpdate(message(no_base, {one, one}), n).ok());
  // Rebuilding needs the values of a version within the chain.
  std::vector<float> scratch;
  auto skip = [](uint64_t, std::span<float>) {};
  auto drop = [](uint64_t, std::span<const float>) {};
  const wire::Message m = message(h, {one, one});
  EXPECT_EQ(worker::ReadFragmentUpdate(m, 2, scratch, skip, drop).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(worker::ReadFragmentUpdate(m, 5, scratch, skip, drop).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // From version 4 only the second update is added.
  std::vector<float> got;
  auto zeros = [](uint64_t, std::span<float> out) { std::fill(out.begin(), out.end(), 0.0f); };
  auto keep = [&](uint64_t, std::span<const float> v) { got.assign(v.begin(), v.end()); };
  ASSERT_TRUE(worker::ReadFragmentUpdate(m, 4, scratch, zeros, keep).ok());
  std::vector<float> once(n);
  ASSERT_TRUE(kernels::Decode(kInt8, one, once).ok());
  EXPECT_TRUE(SameBits(got, once));
}

}  // namespace
}  // namespace diloco::server::testing
