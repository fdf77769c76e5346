// The parts of an island that need no second process: where rank, size and the rendezvous come
// from (flags, torchrun, Slurm), how a config difference is named, the batch slices that make R
// ranks at batch B one worker at batch R x B, and the resume step's file.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "tests/util/temp_dir.h"
#include "worker/data/batcher.h"
#include "worker/island/island.h"
#include "worker/island/island_spec.h"
#include "worker/resume_state.h"

namespace diloco::island {
namespace {

EnvFn Env(std::map<std::string, std::string> vars) {
  auto held = std::make_shared<std::map<std::string, std::string>>(std::move(vars));
  return [held](const char* name) -> const char* {
    auto it = held->find(name);
    return it == held->end() ? nullptr : it->second.c_str();
  };
}

TEST(IslandSpecTest, NothingSetIsAnIslandOfOne) {
  auto s = ResolveIsland({}, Env({}));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->alone());
  EXPECT_EQ(s->rank, 0);
}

TEST(IslandSpecTest, TorchrunVariables) {
  auto s = ResolveIsland({}, Env({{"RANK", "1"},
                                  {"WORLD_SIZE", "4"},
                                  {"MASTER_ADDR", "node1"},
                                  {"MASTER_PORT", "29400"}}));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->rank, 1);
  EXPECT_EQ(s->size, 4);
  EXPECT_EQ(s->master_host, "node1");
  EXPECT_EQ(s->master_port, 29400);
  EXPECT_EQ(s->source, "torchrun");
}

TEST(IslandSpecTest, SlurmStepVariablesAndFlagsWin) {
  const auto env = Env({{"SLURM_PROCID", "1"},
                        {"SLURM_STEP_NUM_TASKS", "2"},
                        {"MASTER_ADDR", "10.0.0.1"},
                        {"MASTER_PORT", "29401"}});
  auto s = ResolveIsland({}, env);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->source, "slurm");
  EXPECT_EQ(s->rank, 1);
  IslandFlags f;
  f.rank = 0, f.size = 3, f.master = "127.0.0.1:5000";
  s = ResolveIsland(f, env);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->source, "flags");
  EXPECT_EQ(s->size, 3);
  EXPECT_EQ(s->master_port, 5000);
}

TEST(IslandSpecTest, ABatchScriptOutsideAStepIsAlone) {
  // sbatch sets SLURM_PROCID (and SLURM_NTASKS for the whole job) in the script itself.
  auto s = ResolveIsland({}, Env({{"SLURM_PROCID", "0"}, {"SLURM_NTASKS", "4"}}));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->alone());
}

TEST(IslandSpecTest, BadInputNamesItsCause) {
  auto expect = [](const IslandFlags& f, std::map<std::string, std::string> env,
                   const std::string& named) {
    auto s = ResolveIsland(f, Env(env));
    ASSERT_FALSE(s.ok()) << named;
    EXPECT_NE(std::string(s.status().message()).find(named), std::string::npos)
        << s.status().message();
  };
  expect({}, {{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}},
         "RANK");
  expect({}, {{"RANK", "0"}}, "WORLD_SIZE");
  expect({}, {{"RANK", "x"}, {"WORLD_SIZE", "2"}}, "not an integer");
  expect({}, {{"RANK", "0"}, {"WORLD_SIZE", "0"}}, ">= 1");
  expect({}, {{"RANK", "0"}, {"WORLD_SIZE", "2"}}, "MASTER_ADDR");
  expect({}, {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "99999"}},
         "MASTER_PORT");
  IslandFlags f;
  f.rank = 0;
  expect(f, {}, "go together");
  f.size = 2, f.master = "nohostport";
  expect(f, {}, "HOST:PORT");
  f.master = "h:1", f.timeout = absl::ZeroDuration();
  expect(f, {}, "--island_timeout");
}

TEST(IslandSpecTest, LocalRankIsLocalRankElseSlurmLocalIdElseZero) {
  const std::map<std::string, std::string> torchrun = {
      {"RANK", "3"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}};
  auto with = [&torchrun](std::map<std::string, std::string> more) {
    more.insert(torchrun.begin(), torchrun.end());
    return ResolveIsland({}, Env(more));
  };
  auto s = with({});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->local_rank, 0);
  EXPECT_EQ(s->local_rank_from, "");
  s = with({{"LOCAL_RANK", "1"}, {"SLURM_LOCALID", "2"}});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->local_rank, 1);
  EXPECT_EQ(s->local_rank_from, "LOCAL_RANK");
  s = with({{"SLURM_LOCALID", "2"}});
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->local_rank, 2);
  EXPECT_EQ(s->local_rank_from, "SLURM_LOCALID");
  s = ResolveIsland({}, Env({{"SLURM_PROCID", "1"},
                             {"SLURM_STEP_NUM_TASKS", "2"},
                             {"SLURM_LOCALID", "1"},
                             {"MASTER_ADDR", "h"},
                             {"MASTER_PORT", "1"}}));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->local_rank, 1);
  s = with({{"LOCAL_RANK", "-1"}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.status().message()).find("LOCAL_RANK=-1"), std::string::npos)
      << s.status();
  s = with({{"SLURM_LOCALID", "one"}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.status().message()).find("SLURM_LOCALID=one"), std::string::npos)
      << s.status();
}

TEST(IslandSpecTest, RendezvousAloneIsAnIslandOfOneThatMeets) {
  IslandFlags f;
  f.rendezvous_alone = true;
  auto s = ResolveIsland(f, Env({}));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.status().message()).find("--island_size=1"), std::string::npos);
  f.rank = 0, f.size = 2, f.master = "h:1";
  s = ResolveIsland(f, Env({}));
  ASSERT_FALSE(s.ok());
  EXPECT_NE(std::string(s.status().message()).find("not an island of one"), std::string::npos);
  f.size = 1;
  s = ResolveIsland(f, Env({}));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->alone());
  EXPECT_EQ(s->master_port, 1);
  f.rendezvous_alone = false;
  s = ResolveIsland(f, Env({}));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->alone());
}

TEST(IslandConfigTest, FirstDifferenceNamesTheSetting) {
  EXPECT_EQ(FirstDifference("model=tiny batch=4 seed=1", "model=tiny batch=4 seed=1"), "");
  EXPECT_EQ(FirstDifference("model=tiny batch=4 seed=1", "model=tiny batch=8 seed=1"),
            "batch 4 vs 8");
  EXPECT_NE(FirstDifference("model=tiny batch=4", "model=tiny"), "");
}

TEST(BatcherSliceTest, SlicesOfTheIslandBatchAreOneWorkersBatch) {
  std::vector<uint16_t> tokens(5000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint16_t((i * 7919) % 50000);
  constexpr int kB = 3, kT = 16, kSlices = 2;
  data::Batcher whole(tokens, kB * kSlices, kT, 42);
  std::vector<data::Batcher> ranks;
  for (int r = 0; r < kSlices; ++r) ranks.emplace_back(tokens, kB, kT, 42, r, kSlices);
  std::vector<int32_t> in(kB * kSlices * kT), tg(in.size()), rin(kB * kT), rtg(rin.size());
  for (int step = 0; step < 5; ++step) {
    whole.Next(in, tg);
    for (int r = 0; r < kSlices; ++r) {
      ranks[r].Next(rin, rtg);
      for (size_t i = 0; i < rin.size(); ++i) {
        ASSERT_EQ(rin[i], in[r * kB * kT + i]) << "step " << step << " rank " << r;
        ASSERT_EQ(rtg[i], tg[r * kB * kT + i]);
      }
    }
  }
}

TEST(ResumeStateTest, RoundTripAndCorruptFileNamed) {
  diloco::testing::TempDir dir("resume_state_");
  auto none = worker::ReadResumePoint(dir.path(), 3);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
  ASSERT_TRUE(worker::WriteResumePoint(dir.path(), 3, {120, absl::Milliseconds(4500)}).ok());
  auto got = worker::ReadResumePoint(dir.path(), 3);
  ASSERT_TRUE(got.ok() && got->has_value());
  EXPECT_EQ((*got)->step, 120);
  EXPECT_EQ((*got)->elapsed, absl::Milliseconds(4500));
  for (const char* bad_text : {"12x 1.0\n", "12\n", "12 -1\n", ""}) {
    std::ofstream(worker::ResumeStatePath(dir.path(), 3)) << bad_text;
    auto bad = worker::ReadResumePoint(dir.path(), 3);
    ASSERT_FALSE(bad.ok()) << bad_text;
    EXPECT_NE(std::string(bad.status().message()).find("worker-3.step"), std::string::npos);
  }
}

}  // namespace
}  // namespace diloco::island
