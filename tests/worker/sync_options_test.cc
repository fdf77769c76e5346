// Validate(SyncOptions) (worker/sync_options.h), the one check behind diloco-worker's flags, the
// Python learner's keywords and SyncClient::Create: the defaults pass, and each rule refuses a
// bad value with InvalidArgument naming the option and the value, as a flag ("--carry_max=0")
// or as a keyword ("carry_max=0"); a refusal from the first rule that fails, one at a time.
#include "worker/sync_options.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/time.h"

namespace diloco::worker {
namespace {

struct Rule {
  std::string name;                          // the case, for the failure message
  std::function<void(SyncOptions&)> breaks;  // one bad value on otherwise good options
  std::string flag_text, keyword_text;       // what the refusal must say in each style
};

SyncOptions Good() {
  SyncOptions o;
  o.servers = {"tcp://127.0.0.1:1"};
  return o;
}

TEST(SyncOptionsTest, DefaultsAndLerpPass) {
  EXPECT_TRUE(Validate(Good()).ok()) << Validate(Good());
  EXPECT_TRUE(Validate(Good(), OptionNames::kKeywords).ok());
  SyncOptions lerp = Good();
  lerp.adopt = SyncOptions::Adopt::kLerp;
  lerp.adopt_alpha = 0.5f;
  lerp.auto_codec = lerp.auto_inner_steps = true;
  lerp.auto_codecs = {lerp.codec};
  lerp.inner_steps_max = 2000;
  EXPECT_TRUE(Validate(lerp).ok()) << Validate(lerp);
}

TEST(SyncOptionsTest, EachRuleRefusesABadValueNamingTheOption) {
  const std::vector<Rule> rules = {
      {"no fragment", [](SyncOptions& o) { o.num_fragments = 0; },
       "--fragments=0: ", "fragments=0: "},
      {"H of 0", [](SyncOptions& o) { o.inner_steps = 0; }, "--inner_steps=0: ", "inner_steps=0: "},
      {"auto H range upside down",
       [](SyncOptions& o) {
         o.auto_inner_steps = true;
         o.inner_steps = 80;
         o.inner_steps_max = 40;
       },
       "--inner_steps_max=40: below the smallest H, --inner_steps_min=80",
       "inner_steps_max=40: below the smallest H, inner_steps_min=80"},
      {"bad codec", [](SyncOptions& o) { o.codec.block = 7; }, "--codec: ", "codec: "},
      {"auto codec without a list",
       [](SyncOptions& o) {
         o.auto_codec = true;
         o.auto_codecs.clear();
       },
       "--auto_codecs: no codec to choose from (--codec=auto)",
       "auto_codecs: no codec to choose from (codec=auto)"},
      {"a bad codec to choose from",
       [](SyncOptions& o) {
         o.auto_codec = true;
         o.auto_codecs = {o.codec, kernels::Codec{kernels::CodecKind::kInt4, 7}};
       },
       "--auto_codecs: ", "auto_codecs: "},
      {"lockstep with auto",
       [](SyncOptions& o) {
         o.lockstep = true;
         o.auto_inner_steps = true;
         o.inner_steps_max = 100;
       },
       "--lockstep with --inner_steps=auto: lockstep runs are deterministic",
       "lockstep with inner_steps=auto: lockstep runs are deterministic"},
      {"overlap without lockstep", [](SyncOptions& o) { o.lockstep_overlap = 5; },
       "--lockstep_overlap=5: applies to --lockstep only",
       "lockstep_overlap=5: applies to lockstep only"},
      {"overlap of a whole round",
       [](SyncOptions& o) {
         o.lockstep = true;
         o.lockstep_overlap = o.inner_steps;
       },
       "--lockstep_overlap=50: must be below --inner_steps=50",
       "lockstep_overlap=50: must be below inner_steps=50"},
      {"link margin below 1", [](SyncOptions& o) { o.link_margin = 0.5; },
       "--link_margin=0.5: expected a factor >= 1", "link_margin=0.5: expected a factor >= 1"},
      {"link margin NaN", [](SyncOptions& o) { o.link_margin = std::nan(""); },
       "--link_margin=nan: ", "link_margin=nan: "},
      {"alpha with keep", [](SyncOptions& o) { o.adopt_alpha = 0.5f; },
       "--adopt_alpha=0.5: applies to --adopt=lerp only", "adopt_alpha=0.5: applies to adopt=lerp"},
      {"alpha above 1",
       [](SyncOptions& o) {
         o.adopt = SyncOptions::Adopt::kLerp;
         o.adopt_alpha = 1.5f;
       },
       "--adopt_alpha=1.5: must be in [0, 1]", "adopt_alpha=1.5: must be in [0, 1]"},
      {"alpha below 0",
       [](SyncOptions& o) {
         o.adopt = SyncOptions::Adopt::kLerp;
         o.adopt_alpha = -0.25f;
       },
       "--adopt_alpha=-0.25: must be in [0, 1]", "adopt_alpha=-0.25: must be in [0, 1]"},
      {"extrapolation below 1", [](SyncOptions& o) { o.extrapolate = 0.5f; },
       "--extrapolate=0.5: must be in [1, 3]", "extrapolate=0.5: must be in [1, 3]"},
      {"extrapolation NaN", [](SyncOptions& o) { o.extrapolate = std::nanf(""); },
       "--extrapolate=nan: must be in [1, 3]", "extrapolate=nan: must be in [1, 3]"},
      {"negative decay", [](SyncOptions& o) { o.ef_decay = -0.5f; },
       "--ef_decay=-0.5: must be in (0, 1]", "ef_decay=-0.5: must be in (0, 1]"},
      {"decay above 1", [](SyncOptions& o) { o.ef_decay = 1.5f; },
       "--ef_decay=1.5: must be in (0, 1]", "ef_decay=1.5: must be in (0, 1]"},
      {"carry of 0", [](SyncOptions& o) { o.carry_max = 0; }, "--carry_max=0: must be at least 1",
       "carry_max=0: must be at least 1"},
      {"no link rate", [](SyncOptions& o) { o.link_rate_floor = 0; },
       "--link_floor_mbit=0: expected a positive rate", "link_floor_mbit=0: "},
      {"heartbeat not below the timeout",
       [](SyncOptions& o) {
         o.heartbeat = absl::Seconds(5);
         o.shard_timeout = absl::Seconds(1);
       },
       "--heartbeat=5s: must be positive and shorter than --shard_timeout=1s",
       "heartbeat=5s: must be positive and shorter than shard_timeout=1s"},
      {"no heartbeat", [](SyncOptions& o) { o.heartbeat = absl::ZeroDuration(); },
       "--heartbeat=0: must be positive", "heartbeat=0: must be positive"},
      {"half a CURVE key set", [](SyncOptions& o) { o.curve_server_key = "x"; },
       "--curve_server_key and --curve_secret_key_file: CURVE takes both or neither",
       "curve_server_key and curve_secret_key_file: CURVE takes both or neither"},
  };
  for (const Rule& r : rules) {
    SCOPED_TRACE(r.name);
    SyncOptions o = Good();
    r.breaks(o);
    const absl::Status flags = Validate(o);
    EXPECT_TRUE(absl::IsInvalidArgument(flags)) << flags;
    EXPECT_EQ(flags.message().find(r.flag_text), 0u) << flags;
    const absl::Status keywords = Validate(o, OptionNames::kKeywords);
    EXPECT_TRUE(absl::IsInvalidArgument(keywords)) << keywords;
    EXPECT_EQ(keywords.message().find(r.keyword_text), 0u) << keywords;
  }
}

// The extrapolation applies where training goes on while a push is out and the adoption keeps
// the local work: asynchronous keep, and lockstep with an overlap.
TEST(SyncOptionsTest, ExtrapolationAppliesOnlyWhereAPushOverlapsTraining) {
  SyncOptions o = Good();
  o.extrapolate = 1.5f;
  EXPECT_EQ(PushExtrapolation(o), 1.5f);
  o.lockstep = true;
  EXPECT_EQ(PushExtrapolation(o), 1.0f);
  o.lockstep_overlap = 10;
  EXPECT_EQ(PushExtrapolation(o), 1.5f);
  o.lockstep = false;
  o.lockstep_overlap = 0;
  o.adopt = SyncOptions::Adopt::kLerp;
  EXPECT_EQ(PushExtrapolation(o), 1.0f);
  EXPECT_EQ(PushExtrapolation(Good()), 1.25f);  // the default
}

TEST(SyncOptionsTest, AlignmentAppliesOnlyToAsynchronousKeepingWorkers) {
  EXPECT_TRUE(PushAlignment(Good()));  // the default
  SyncOptions o = Good();
  o.align_pushes = false;
  EXPECT_FALSE(PushAlignment(o));
  o = Good();
  o.lockstep = true;  // pushes already leave at the same step counts
  EXPECT_FALSE(PushAlignment(o));
  o.lockstep_overlap = 10;
  EXPECT_FALSE(PushAlignment(o));
  o = Good();
  o.adopt = SyncOptions::Adopt::kLerp;  // its steps count from the adoption already
  EXPECT_FALSE(PushAlignment(o));
}

// A fault is a test's own: the options with faults pass like any others.
TEST(SyncOptionsTest, TestFaultsAreNotValidated) {
  SyncOptions o = Good();
  auto faults = std::make_shared<TestFaults>();
  faults->lose_push_sends = FaultCount(3);
  o.faults = faults;
  EXPECT_TRUE(Validate(o).ok());
}

}  // namespace
}  // namespace diloco::worker
