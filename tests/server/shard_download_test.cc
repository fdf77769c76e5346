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

// A worker's copy of one fragment: the values of `version`, and of its keyframe when that is
// another version, updated from FragmentUpdates as the sync client does (worker/
// training_sync.cc).
struct Mirror {
  std::vector<float> values;
  uint64_t version = 0;
  uint64_t keyframe = 0;  // 0: none, or the worker does not say (an older one)
  std::vector<float> keyframe_values;
  bool says = true;  // it says its keyframe in its pushes (an older worker does not)

  Mirror() = default;
  Mirror(std::vector<float> v, uint64_t version, bool says_keyframe = true)
      : values(std::move(v)),
        version(version),
        keyframe(says_keyframe ? version : 0),
        says(says_keyframe) {}

  // Adopts `o`; returns the checksum the rebuild produced (0 for a whole fragment).
  uint64_t Take(const Outgoing& o) {
    const wire::Message m = Received(o);
    EXPECT_TRUE(worker::CheckFragmentUpdate(m, values.size()).ok());
    worker::ChainPlan plan;
    if (worker::IsUpdateChain(m.header())) {
      auto p = worker::PlanChain(m.header(), version, keyframe);
      EXPECT_TRUE(p.ok()) << p.status();
      if (!p.ok()) return 0;
      plan = *p;
    }
    const std::vector<float>& from =
        plan.source == worker::ChainPlan::Source::kKeyframe ? keyframe_values : values;
    std::vector<float> next(values.size()), kept = keyframe_values, scratch;
    auto sum = worker::ReadFragmentUpdate(
        m, plan, scratch,
        [&](uint64_t pos, std::span<float> out) {
          std::memcpy(out.data(), from.data() + pos, out.size_bytes());
        },
        [&](uint64_t pos, std::span<const float> v) {
          std::memcpy(next.data() + pos, v.data(), v.size_bytes());
        },
        [&](uint64_t pos, std::span<const float> v) {
          kept.resize(values.size());
          std::memcpy(kept.data() + pos, v.data(), v.size_bytes());
        });
    EXPECT_TRUE(sum.ok()) << sum.status();
    values = std::move(next);
    keyframe_values = std::move(kept);
    version = o.header.version;
    if (says) keyframe = worker::IsUpdateChain(m.header()) ? plan.keyframe : version;
    return sum.ok() ? *sum : 0;
  }
};

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

class ShardDownloadTest : public ::testing::Test {
 protected:
  void SetUpShard(kernels::Codec download, uint32_t quorum = 2, uint32_t keyframe_every = 1,
                  absl::Duration worker_timeout = absl::Seconds(10)) {
    auto o = TinyOptions(/*fragments=*/1);
    o.worker_timeout = worker_timeout;
    o.round.quorum = quorum;
    o.download = download;
    o.download_keyframe_every = keyframe_every;
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
  // `m` pushes on what it holds, saying its keyframe as a worker does (0 for an older one).
  void PushFrom(const std::string& rid, uint32_t worker, uint64_t seq, const Mirror& m,
                uint32_t seed) {
    const auto delta = Random(n_, 0.01f, seed);
    auto h = h_->PushFields(worker, 0, seq, m.version, n_, 100, 10, wire::kFragmentCodec);
    h.keyframe_version = m.keyframe;
    h_->Send(rid, h, ShardHarness::Encode(wire::kFragmentCodec, delta));
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

// Keyframes every 4 versions (docs/protocol.md, "Keyframes"): a worker several versions behind
// takes one update where the chain of every version would be larger than the whole fragment,
// and one more per keyframe it crossed; a version made while every live worker holds the one
// before is a keyframe; every rebuild is the published values to the bit.
TEST_F(ShardDownloadTest, WithKeyframesAWorkerBehindTakesOneUpdate) {
  // Workers live 20 s: each pushes at least every third round of 6 s below (the other is live
  // and missing: a round closes at the 5 s cap).
  SetUpShard(kInt8, /*quorum=*/1, /*keyframe_every=*/4, absl::Seconds(20));
  auto pull = h_->Base(MsgType::Pull, 2);  // b joins: it holds version 1
  pull.fragment_id = 0;
  b_.Take(*Only(h_->Send("b", pull), MsgType::FragmentUpdate));
  // One push and its answer: the update count, its base, the keyframe after it.
  auto round = [&](const std::string& rid, uint32_t worker, uint64_t seq, Mirror& m,
                   uint64_t version, uint64_t base, uint32_t updates, uint64_t keyframe) {
    SCOPED_TRACE(absl::StrCat(rid, " to version ", version));
    PushFrom(rid, worker, seq, m, static_cast<uint32_t>(10 * version));
    h_->clock().Advance(absl::Seconds(6));
    const auto out = h_->Tick();
    const Outgoing* u = To(out, rid);
    ASSERT_NE(u, nullptr);
    EXPECT_EQ(u->header.codec, static_cast<uint8_t>(kernels::CodecKind::kInt8));
    EXPECT_EQ(u->header.version, version);
    EXPECT_EQ(u->header.base_version, base);
    EXPECT_EQ(u->header.chain_updates, updates);
    EXPECT_EQ(u->payloads.size(), updates);  // one chunk per update at this size
    EXPECT_EQ(u->header.keyframe_version, keyframe);
    EXPECT_EQ(m.Take(*u), u->header.values_checksum);
    EXPECT_TRUE(SameBits(m.values, h_->shard().params(0)));
    EXPECT_EQ(m.keyframe, keyframe);
  };
  // Version 2: everyone holds 1, so 2 is a keyframe. 3 and 4 are built on it (b holds 1).
  round("a", 1, 1, a_, 2, 1, 1, 2);
  round("a", 1, 2, a_, 3, 2, 1, 2);  // a keeps P_2 apart
  round("a", 1, 3, a_, 4, 2, 1, 2);  // from a's keyframe: 4 is built on 2, not on 3
  // b, three versions behind: version 5 is U_2 then U_5 (the chain of every version, four
  // updates, would be sent whole).
  round("b", 2, 1, b_, 5, 1, 2, 2);
  round("a", 1, 4, a_, 6, 2, 1, 6);  // 6 = 2 + 4: a keyframe, built on 2
  round("b", 2, 2, b_, 7, 2, 2, 6);  // U_6, U_7 from b's keyframe 2
  round("a", 1, 5, a_, 8, 6, 1, 6);  // a holds keyframe 6 itself
  // A worker that does not say its keyframe (an older one) reads chains as one update per
  // version: b at 7 gets version 9 (U_9 on keyframe 6) whole, and 9 becomes a keyframe.
  Mirror older(b_.values, b_.version, /*says_keyframe=*/false);
  PushFrom("b", 2, 3, older, 103);
  h_->clock().Advance(absl::Seconds(6));
  const auto out = h_->Tick();
  const Outgoing* whole = To(out, "b");
  ASSERT_NE(whole, nullptr);
  EXPECT_EQ(whole->header.codec, static_cast<uint8_t>(kernels::CodecKind::kFp32));
  b_ = Mirror(h_->shard().params(0), 9);
  round("b", 2, 4, b_, 10, 9, 1, 9);
  round("a", 1, 6, a_, 11, 6, 2, 9);  // U_9, U_11 from a's keyframe 6
}

// A fleet in lockstep (every worker holds the version before each new one) publishes with
// keyframes the values it publishes without them, to the bit: every version is a keyframe.
TEST_F(ShardDownloadTest, InLockstepKeyframesChangeNoBit) {
  SetUpShard(kInt8, /*quorum=*/2, /*keyframe_every=*/4);
  auto o = TinyOptions(1);
  o.round.quorum = 2;
  o.download = kInt8;
  o.download_keyframe_every = 1;
  ShardHarness plain(o);
  plain.Hello("a", 1);
  plain.Hello("b", 2);
  plain.Init("a", 1, 0, a_.values);
  // Both workers join by pulling version 1 whole, which makes it a keyframe.
  for (ShardHarness* s : {h_.get(), &plain})
    for (auto [rid, id] : {std::pair{"a", 1u}, std::pair{"b", 2u}}) {
      auto pull = s->Base(MsgType::Pull, id);
      pull.fragment_id = 0;
      s->Send(rid, pull);
    }
  for (uint64_t r = 1; r <= 12; ++r) {
    const auto da = Random(n_, 0.01f, static_cast<uint32_t>(3 * r));
    const auto db = Random(n_, 0.01f, static_cast<uint32_t>(3 * r + 1));
    for (ShardHarness* s : {h_.get(), &plain}) {
      s->Push("a", 1, 0, r, r, da);
      s->Push("b", 2, 0, r, r, db);
    }
    const auto out = h_->Tick();
    plain.Tick();
    const Outgoing* u = To(out, "a");
    ASSERT_NE(u, nullptr);
    EXPECT_EQ(u->header.keyframe_version, r + 1);
    EXPECT_TRUE(SameBits(h_->shard().params(0), plain.shard().params(0))) << "round " << r;
  }
  // Nor a byte of memory: no keyframe's values are kept apart, not even the joins' (both hold a
  // residual and the updates no one has taken yet).
  auto download_bytes = [](ShardHarness& s) {
    const std::string j = s.shard().StatsJson();
    const size_t at = j.find("\"download_bytes\":");
    EXPECT_NE(at, std::string::npos);
    return std::stoull(j.substr(at + 17));
  };
  EXPECT_EQ(download_bytes(*h_), download_bytes(plain));
}

// A pull is answered whole and makes its version a keyframe: the puller's next download is an
// update again, and so is the others'.
TEST_F(ShardDownloadTest, WithKeyframesAPulledVersionIsAKeyframe) {
  SetUpShard(kInt8, /*quorum=*/1, /*keyframe_every=*/100, absl::Seconds(30));
  h_->Hello("c", 3);
  auto pull = [&](const std::string& rid, uint32_t worker) {
    auto h = h_->Base(MsgType::Pull, worker);
    h.fragment_id = 0;
    return h_->Send(rid, h);
  };
  b_.Take(*Only(pull("b", 2), MsgType::FragmentUpdate));  // b holds 1 throughout: a lags
  for (uint64_t seq = 1; seq <= 3; ++seq) {  // 2 (everyone held 1), then 3 and 4 built on 2
    PushFrom("a", 1, seq, a_, static_cast<uint32_t>(seq));
    h_->clock().Advance(absl::Seconds(6));
    a_.Take(*To(h_->Tick(), "a"));
  }
  ASSERT_EQ(a_.keyframe, 2u);
  Mirror c(std::vector<float>(n_), 0);
  c.Take(*Only(pull("c", 3), MsgType::FragmentUpdate));
  ASSERT_EQ(c.version, 4u);
  EXPECT_EQ(c.keyframe, 4u);
  auto expect_one = [&](const std::string& rid, uint32_t worker, uint64_t seq, Mirror& m) {
    PushFrom(rid, worker, seq, m, static_cast<uint32_t>(50 + seq));
    h_->clock().Advance(absl::Seconds(6));
    const auto out = h_->Tick();
    const Outgoing* u = To(out, rid);
    ASSERT_NE(u, nullptr);
    EXPECT_EQ(u->header.base_version, 4u);  // built on the pulled version
    EXPECT_EQ(u->header.chain_updates, 1u);
    EXPECT_EQ(m.Take(*u), u->header.values_checksum);
    EXPECT_TRUE(SameBits(m.values, h_->shard().params(0)));
    EXPECT_EQ(m.keyframe, 4u);
  };
  expect_one("c", 3, 1, c);   // version 5 from 4
  expect_one("a", 1, 4, a_);  // version 6 from 4, which a holds: a keeps P_4 apart
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
// residual carries what each update's quantization left out. With keyframes every 4 versions
// (one worker pushing on version 1 throughout, so no version is caught up) an update spans up
// to 4 versions' steps, and so does its grid.
class PublishedValuesTest : public ShardDownloadTest,
                            public ::testing::WithParamInterface<uint32_t> {};

TEST_P(PublishedValuesTest, TrackTheOuterOptimizer) {
  const uint32_t every = GetParam();
  // a pushes every round; b, live, holds version 1 throughout (it pulled it and pushes nothing),
  // so with keyframes no version is caught up. Rounds close at the 5 s cap (b is missing).
  SetUpShard(kInt8, /*quorum=*/1, every, absl::Seconds(1000));
  auto pull = h_->Base(MsgType::Pull, 2);
  pull.fragment_id = 0;
  h_->Send("b", pull);
  auto o = TinyOptions(1);
  o.worker_timeout = absl::Seconds(1000);
  ShardHarness exact(o);
  exact.Hello("a", 1);
  exact.Hello("b", 2);
  exact.Init("a", 1, 0, a_.values);
  double worst = 0, largest_step = 0;
  std::vector<float> before = exact.shard().params(0);
  for (uint64_t r = 1; r <= 30; ++r) {
    const auto da = Random(n_, 0.01f, static_cast<uint32_t>(3 * r));
    for (ShardHarness* s : {h_.get(), &exact}) {
      s->Push("a", 1, 0, r, r, da);
      s->clock().Advance(absl::Seconds(6));
      s->Tick();
    }
    ASSERT_EQ(h_->shard().published_version(0), r + 1);
    const auto p = h_->shard().params(0), t = exact.shard().params(0);
    for (size_t i = 0; i < n_; ++i) {
      worst = std::max(worst, std::fabs(static_cast<double>(p[i]) - t[i]));
      largest_step = std::max(largest_step, std::fabs(static_cast<double>(t[i]) - before[i]));
    }
    before = t;
  }
  // Half an int8 grid step of the largest update is largest_step / 254 (x every with
  // keyframes); the residual's own int4 encoding loses under 1/14 of that a version. Without
  // the residual the error would grow with the rounds.
  EXPECT_GT(worst, 0.0);
  EXPECT_LT(worst, largest_step * every / 254 * 1.5);
}

INSTANTIATE_TEST_SUITE_P(Keyframes, PublishedValuesTest, ::testing::Values(1u, 4u));

TEST(DownloadChainTest, KeyframesBuildEachUpdateOnTheLastKeyframe) {
  const uint64_t n = 5000;
  DownloadChain chain(kInt8, n, /*every=*/3);
  std::vector<float> p(n, 0.0f), scratch;
  for (uint64_t v = 2; v <= 8; ++v) {  // keyframes 1 (the first base), 4, 7
    std::vector<float> next = Random(n, 1.0f, static_cast<uint32_t>(v));
    ASSERT_TRUE(chain.Quantize(v, p, next, scratch));
    p = next;
  }
  EXPECT_EQ(chain.keyframe(), 7u);
  auto versions = [&](uint64_t base, uint64_t version) {
    std::vector<uint64_t> v;
    for (const DownloadUpdate* u : chain.Between(base, version)) v.push_back(u->version);
    return v;
  };
  EXPECT_EQ(versions(1, 6), (std::vector<uint64_t>{4, 6}));
  EXPECT_EQ(versions(4, 6), (std::vector<uint64_t>{6}));
  EXPECT_EQ(versions(1, 8), (std::vector<uint64_t>{4, 7, 8}));
  EXPECT_TRUE(versions(5, 6).empty());  // 5 is no keyframe: nothing is built on it
  EXPECT_TRUE(versions(2, 8).empty());
  // Everyone holds 4 or newer and 8 is published: the non-keyframes before 8 go, and 4.
  chain.Trim(/*oldest_base=*/4, /*published=*/8, /*max_updates=*/8);
  EXPECT_EQ(chain.size(), 2u);
  EXPECT_EQ(versions(4, 8), (std::vector<uint64_t>{7, 8}));
  // The update, the residual and the keyframe's values.
  EXPECT_EQ(chain.bytes(), 2 * chain.update_bytes() + (n / 2 + (n + 63) / 64 * 4) + 4 * n);
  // A whole fragment sent at 8 makes it the keyframe: 9 is built on it.
  chain.MarkKeyframe(8, p, /*newest=*/true);
  std::vector<float> next = Random(n, 1.0f, 9);
  ASSERT_TRUE(chain.Quantize(9, p, next, scratch));
  EXPECT_EQ(versions(8, 9), (std::vector<uint64_t>{9}));
  EXPECT_EQ(versions(4, 9), (std::vector<uint64_t>{7, 8, 9}));
  // Every version a keyframe: the chain of one update per version, as without keyframes.
  DownloadChain plain(kInt8, n, /*every=*/1);
  std::vector<float> q(n, 0.0f);
  for (uint64_t v = 2; v <= 4; ++v) {
    std::vector<float> nq = Random(n, 1.0f, static_cast<uint32_t>(v));
    ASSERT_TRUE(plain.Quantize(v, q, nq, scratch));
    q = nq;
  }
  std::vector<uint64_t> all;
  for (const DownloadUpdate* u : plain.Between(1, 4)) all.push_back(u->version);
  EXPECT_EQ(all, (std::vector<uint64_t>{2, 3, 4}));
  EXPECT_EQ(plain.bytes(), 3 * plain.update_bytes() + (n / 2 + (n + 63) / 64 * 4));
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
  chain.Trim(/*oldest_base=*/4, /*published=*/6, /*max_updates=*/8);  // all hold 4 or newer
  EXPECT_EQ(chain.size(), 2u);
  EXPECT_TRUE(chain.Between(3, 5).empty());
  chain.Trim(0, 6, 1);
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
  auto more = h;  // 3 updates between versions 3 and 5
  more.chain_updates = 3;
  EXPECT_FALSE(worker::CheckFragmentUpdate(message(more, {one, one, one}), n).ok());
  auto outside = h;  // a keyframe outside the chain
  outside.keyframe_version = 6;
  EXPECT_FALSE(worker::CheckFragmentUpdate(message(outside, {one, one}), n).ok());
  // Rebuilding needs the values of a version within the chain.
  const wire::Message m = message(h, {one, one});
  EXPECT_EQ(worker::PlanChain(m.header(), 2, 2).status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(worker::PlanChain(m.header(), 5, 5).status().code(),
            absl::StatusCode::kFailedPrecondition);
  // From version 4 only the second update is added.
  std::vector<float> scratch, got;
  auto zeros = [](uint64_t, std::span<float> out) { std::fill(out.begin(), out.end(), 0.0f); };
  auto take = [&](uint64_t, std::span<const float> v) { got.assign(v.begin(), v.end()); };
  auto drop = [](uint64_t, std::span<const float>) { ADD_FAILURE() << "nothing to keep"; };
  auto plan = worker::PlanChain(m.header(), 4, 4);
  ASSERT_TRUE(plan.ok());
  EXPECT_EQ(plan->skip, 1u);
  ASSERT_TRUE(worker::ReadFragmentUpdate(m, *plan, scratch, zeros, take, drop).ok());
  std::vector<float> once(n);
  ASSERT_TRUE(kernels::Decode(kInt8, one, once).ok());
  EXPECT_TRUE(SameBits(got, once));
}

// Where a worker starts a chain and which values it keeps as its next keyframe.
TEST(FragmentUpdateTest, PlanChainStartsFromWhatTheWorkerHolds) {
  auto header = [](uint64_t base, uint64_t version, uint32_t updates, uint64_t keyframe) {
    wire::HeaderFields h;
    h.type = MsgType::FragmentUpdate;
    wire::SetPayloadLayout(h, kInt8, 100);
    h.base_version = base;
    h.version = version;
    h.chain_updates = updates;
    h.keyframe_version = keyframe;
    std::vector<std::vector<uint8_t>> payloads(
        updates != 0 ? updates : version - base,
        std::vector<uint8_t>(kernels::EncodedSize(kInt8, 100)));
    auto m = wire::ParseMessage(ShardHarness::Frames(h, payloads));
    EXPECT_TRUE(m.ok()) << m.status();
    return *std::move(m);
  };
  using Source = worker::ChainPlan::Source;
  {  // U_7 (a keyframe) and U_9 on keyframe 4
    const wire::Message m = header(4, 9, 2, 7);
    auto from_key = worker::PlanChain(m.header(), 6, 4);  // holds 6, keyframe 4 apart
    ASSERT_TRUE(from_key.ok());
    EXPECT_EQ(from_key->source, Source::kKeyframe);
    EXPECT_EQ(from_key->keep_after, 1);  // P_7, after the first update
    EXPECT_EQ(from_key->keyframe, 7u);
    auto from_held = worker::PlanChain(m.header(), 4, 4);
    ASSERT_TRUE(from_held.ok());
    EXPECT_EQ(from_held->source, Source::kHeld);
    EXPECT_EQ(from_held->keep_after, 1);
    EXPECT_FALSE(worker::PlanChain(m.header(), 6, 3).ok());  // neither 4 nor one per version
  }
  {  // U_6 on keyframe 5, which the worker holds: it keeps P_5 apart
    const wire::Message m = header(5, 6, 1, 5);
    auto p = worker::PlanChain(m.header(), 5, 5);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->keep_after, 0);
    EXPECT_EQ(p->keyframe, 5u);
    auto kept = worker::PlanChain(m.header(), 5, 0);  // no keyframe said: still from the held
    ASSERT_TRUE(kept.ok());
    EXPECT_EQ(kept->keep_after, 0);
  }
  {  // U_8 on keyframe 5, kept apart already: nothing new to keep
    const wire::Message m = header(5, 8, 1, 5);
    auto p = worker::PlanChain(m.header(), 6, 5);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->source, Source::kKeyframe);
    EXPECT_EQ(p->keep_after, -1);
    EXPECT_EQ(p->keyframe, 5u);
  }
  {  // one update per version, 5 a keyframe: from 4 one is skipped, P_5 kept after two
    const wire::Message m = header(3, 6, 0, 5);
    auto p = worker::PlanChain(m.header(), 4, 4);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->skip, 1u);
    EXPECT_EQ(p->keep_after, 2);
    auto past = worker::PlanChain(m.header(), 5, 5);  // holds 5: kept from the start
    ASSERT_TRUE(past.ok());
    EXPECT_EQ(past->skip, 2u);
    EXPECT_EQ(past->keep_after, 2);
  }
  {  // without keyframes (fields unsaid) every version is one: nothing kept apart
    const wire::Message m = header(3, 6, 0, 0);
    auto p = worker::PlanChain(m.header(), 3, 3);
    ASSERT_TRUE(p.ok());
    EXPECT_EQ(p->keep_after, -1);
    EXPECT_EQ(p->keyframe, 6u);
  }
}

}  // namespace
}  // namespace diloco::server::testing
