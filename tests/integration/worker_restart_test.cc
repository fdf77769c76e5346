// A restarted learner (--start_step): it resumes its learning-rate schedule at the step it had
// reached, trains only the rest of --steps, and draws other batches than the ones it trained
// before (the same seed would replay them from the start). benchmarks/quality/run.sh restarts
// the learners of its failure arms this way. With --state_dir it resumes by itself: schedule,
// data stream and optimizer where its last record left them, and ends where an unkilled run
// ends.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/integration/cluster.h"
#include "worker/optimizer_state.h"
#include "worker/resume_state.h"

namespace diloco::testing {
namespace {

// Runs the tests' tiny worker alone (no sync) with `extra` flags, a progress event every step,
// and returns its events.
std::vector<Event> RunAlone(const std::filesystem::path& jsonl,
                            const std::vector<std::string>& extra) {
  std::vector<std::string> argv = TinyWorkerArgs(0, {}, jsonl);
  argv.insert(argv.end(), {"--steps=40", "--lr_schedule=cosine", "--warmup_steps=5",
                           "--progress_interval=0s", "--seed=7"});
  argv.insert(argv.end(), extra.begin(), extra.end());
  Process p(argv, jsonl.string() + ".log");
  EXPECT_EQ(p.Wait(absl::Seconds(60)), std::optional<int>(0));
  return ReadEvents(jsonl);
}

std::string ReadFile(const std::filesystem::path& p) {
  std::ifstream in(p);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// |killed - unkilled| of the final held-out loss. Measured 2026-12-06 (8 pairs, 3 quiet, 5 with
// both cores loaded by `yes`): unkilled 3.5504-3.5590, killed and resumed 0.003-0.023 above its
// pair (the larger when the resume point was recorded 3 steps after the push at step 120 rather
// than 1: those steps' work is lost). Twice the largest difference. Measured again 2026-12-07,
// 30 pairs with both cores loaded (two busy loops beside others' builds and tests, load 5-7):
//   integration_worker_restart_test --gtest_filter='*AKilledLearner*' --gtest_repeat=30
// killed minus unkilled -0.005..+0.032, mean +0.013, sd 0.008 (the work since its last applied
// pushes dies with the killed run, hence the positive mean); unkilled 3.549-3.586. The bound stays:
// the mean plus 4.5 sd, 1.5 times the largest.
constexpr double kResumeLossBound = 0.05;

std::map<int, Event> ProgressByStep(const std::vector<Event>& events) {
  std::map<int, Event> out;
  for (const Event& e : events)
    if (e.contains("lr") && e.contains("step")) out[static_cast<int>(e.at("step"))] = e;
  return out;
}

TEST(WorkerRestartTest, ResumesItsScheduleAtTheStartStepOnOtherBatches) {
  const auto dir = TestDir();
  const auto whole = RunAlone(dir / "whole.jsonl", {});
  const auto resumed = RunAlone(dir / "resumed.jsonl", {"--start_step=30"});
  const auto a = ProgressByStep(whole), b = ProgressByStep(resumed);
  ASSERT_EQ(a.size(), 40u);
  ASSERT_EQ(b.size(), 10u) << "the restarted run trains steps 31..40 only";
  EXPECT_EQ(b.begin()->first, 31);
  for (const auto& [step, e] : b)
    EXPECT_DOUBLE_EQ(e.at("lr"), a.at(step).at("lr")) << "step " << step;
  EXPECT_LT(b.at(31).at("lr"), a.at(6).at("lr")) << "the schedule started over";
  // The first step's loss is theta(0)'s (the same init seed) on the first batch: equal only if
  // the restart replayed the batches the learner trained before.
  EXPECT_NE(b.at(31).at("loss"), a.at(1).at("loss"));
  Event done;
  for (const Event& e : resumed)
    if (e.contains("start_step")) done = e;
  ASSERT_FALSE(done.empty()) << "no done event with start_step";
  EXPECT_EQ(done.at("steps"), 10);
  EXPECT_EQ(done.at("start_step"), 30);
}

// One learner against one shard, --state_dir kept, a small step delay so that a kill lands
// mid-run; `kill_after` > 0: SIGKILLed once its resume point passes that step, then started
// again with the same command. Returns the last run's done event.
struct FleetRun {
  Event done;
  int64_t resumed_at = 0;
  std::string log;
};
FleetRun RunInFleet(const std::filesystem::path& dir, int64_t kill_after) {
  std::filesystem::create_directories(dir);
  LocalShards shards;
  shards.dir = dir;
  shards.StartShards(1);
  const std::string state = (dir / "state").string();
  std::vector<std::string> argv = TinyWorkerArgs(0, shards.endpoints, dir / "w.jsonl");
  argv.insert(argv.end(), {"--steps=300", "--lr_schedule=cosine", "--warmup_steps=10", "--seed=7",
                           "--step_delay=3ms", "--state_every=20", "--state_dir=" + state});
  FleetRun out;
  if (kill_after > 0) {
    Process p(argv, (dir / "killed.log").string());
    const absl::Time deadline = absl::Now() + absl::Seconds(60);
    absl::StatusOr<std::optional<worker::ResumePoint>> point;
    while (absl::Now() < deadline) {
      point = worker::ReadResumePoint(state, 0);
      if (point.ok() && point->has_value() && (*point)->step >= kill_after) break;
      absl::SleepFor(absl::Milliseconds(20));
    }
    EXPECT_TRUE(point.ok() && point->has_value() && (*point)->step >= kill_after)
        << ReadFile(dir / "killed.log");
    p.Signal(SIGKILL);
    p.Wait(absl::Seconds(10));
    auto recorded = worker::ReadResumePoint(state, 0);
    EXPECT_TRUE(recorded.ok() && recorded->has_value());
    if (recorded.ok() && recorded->has_value()) out.resumed_at = (*recorded)->step;
    EXPECT_LT(out.resumed_at, 300) << "it finished before the kill";
    EXPECT_TRUE(std::filesystem::exists(worker::OptimizerStatePath(state, 0)));
  }
  Process p(argv, (dir / "run.log").string());
  EXPECT_EQ(p.Wait(absl::Seconds(90)), std::optional<int>(0)) << ReadFile(dir / "run.log");
  out.log = ReadFile(dir / "run.log");
  for (const Event& e : ReadEvents(dir / "w.jsonl"))
    if (e.contains("eval_local")) out.done = e;
  return out;
}

// Killed mid-run and started again, a learner continues its schedule, its data stream and its
// optimizer from --state_dir, and its model ends where an unkilled learner's does, within the
// run-to-run scatter of the asynchronous fleet (the bound below: tests/integration/README).
TEST(WorkerRestartTest, AKilledLearnerResumesFromItsStateDirAndEndsWhereAnUnkilledOneDoes) {
  const auto dir = TestDir();
  const FleetRun whole = RunInFleet(dir / "whole", 0);
  const FleetRun killed = RunInFleet(dir / "killed", 120);
  ASSERT_FALSE(whole.done.empty());
  ASSERT_FALSE(killed.done.empty()) << killed.log;
  EXPECT_EQ(killed.done.at("start_step"), killed.resumed_at);
  EXPECT_EQ(killed.done.at("steps"), 300 - killed.resumed_at);
  EXPECT_NE(killed.log.find(absl::StrCat("resumes its schedule at step ", killed.resumed_at)),
            std::string::npos)
      << killed.log;
  EXPECT_NE(killed.log.find("its data stream where it stood, its optimizer's moments of step"),
            std::string::npos)
      << killed.log;
  const double a = whole.done.at("eval_local"), b = killed.done.at("eval_local");
  const double initial = whole.done.at("eval_initial");
  std::printf("held-out loss: unkilled %.4f, killed at %ld and resumed %.4f (theta(0) %.4f)\n", a,
              static_cast<long>(killed.resumed_at), b, initial);
  EXPECT_LT(a, initial - 0.5) << "the unkilled run did not train";
  EXPECT_NEAR(b, a, kResumeLossBound);
}

}  // namespace
}  // namespace diloco::testing
