// Validate(ShardOptions) (server/shard_validate.h), the one check behind diloco-server's flags
// and Shard::Create: the defaults pass, and each rule refuses a bad value with InvalidArgument
// naming the flag and the value; Shard::Create refuses with the same words, before it reads the
// model or opens a store.
#include "server/shard_validate.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/clock.h"
#include "common/faults.h"
#include "kernels/codec.h"

namespace diloco::server {
namespace {

struct Rule {
  std::string name;                           // the case, for the failure message
  std::function<void(ShardOptions&)> breaks;  // one bad value on otherwise good options
  std::string text;                           // how the refusal starts
};

std::shared_ptr<const TestFaults> Drop(double fraction) {
  auto f = std::make_shared<TestFaults>();
  f->drop_pushes = fraction;
  return f;
}

TEST(ShardOptionsTest, DefaultsAndEdgeValuesPass) {
  EXPECT_TRUE(Validate(ShardOptions{}).ok()) << Validate(ShardOptions{});
  ShardOptions o;
  o.push_steps_cap = 0;
  o.push_norm_cap = 1;
  o.faults = Drop(0.5);
  o.download = *kernels::ParseCodec("int8:256");
  o.download_chain = 1;
  o.download_keyframe_every = 8;
  o.outer_mode = OuterMode::kDelayedNesterov;
  EXPECT_TRUE(Validate(o).ok()) << Validate(o);
}

TEST(ShardOptionsTest, EachRuleRefusesABadValueNamingTheFlag) {
  const std::vector<Rule> rules = {
      {"shard out of range",
       [](ShardOptions& o) {
         o.num_shards = 2;
         o.shard = 5;
       },
       "--shard=5: out of range for --shards=2"},
      {"quorum 0", [](ShardOptions& o) { o.round.quorum = 0; }, "--quorum=0: must be at least 1"},
      {"RDA with Delayed Nesterov",
       [](ShardOptions& o) {
         o.outer_mode = OuterMode::kDelayedNesterov;
         o.merge = MergeRule::kRda;
       },
       "--merge=rda: RDA merges a round, and --outer=delayed-nesterov has no rounds"},
      {"period 0", [](ShardOptions& o) { o.dn_period = 0; }, "--dn_period=0: "},
      {"steps cap below 1", [](ShardOptions& o) { o.push_steps_cap = 0.5; },
       "--push_steps_cap=0.5: must be 0 (off) or at least 1"},
      {"norm cap infinite", [](ShardOptions& o) { o.push_norm_cap = INFINITY; },
       "--push_norm_cap=inf: must be 0 (off) or at least 1"},
      {"drop all", [](ShardOptions& o) { o.faults = Drop(1); },
       "--test_drop_pushes=1: the fraction of pushes to drop must be in [0, 1)"},
      {"drop negative", [](ShardOptions& o) { o.faults = Drop(-0.5); },
       "--test_drop_pushes=-0.5: "},
      {"apply threads", [](ShardOptions& o) { o.apply_threads = -1; },
       "--apply_threads=-1: must be >= 0"},
      {"download codec", [](ShardOptions& o) { o.download.block = 7; }, "--download_codec: "},
      {"download chain 0",
       [](ShardOptions& o) {
         o.download = *kernels::ParseCodec("int4:256");
         o.download_chain = 0;
       },
       "--download_chain=0: a quantized download"},
      {"keyframes 0", [](ShardOptions& o) { o.download_keyframe_every = 0; },
       "--download_keyframe_every=0: must be >= 1"},

      {"kept trains", [](ShardOptions& o) { o.keep_trains.time = absl::Seconds(-1); },
       "--keep_cut_trains_for=-1s: must not be negative"},
  };
  FakeClock clock;
  for (const Rule& r : rules) {
    SCOPED_TRACE(r.name);
    ShardOptions o;
    r.breaks(o);
    const absl::Status st = Validate(o);
    EXPECT_TRUE(absl::IsInvalidArgument(st)) << st;
    EXPECT_EQ(st.message().find(r.text), 0u) << st;
    const auto shard = Shard::Create(o, &clock);
    ASSERT_FALSE(shard.ok());
    EXPECT_EQ(shard.status(), st);
  }
}

}  // namespace
}  // namespace diloco::server
