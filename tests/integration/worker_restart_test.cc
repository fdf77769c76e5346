// A restarted learner (--start_step): it resumes its learning-rate schedule at the step it had
// reached, trains only the rest of --steps, and draws other batches than the ones it trained
// before (the same seed would replay them from the start). benchmarks/quality/run.sh restarts
// the learners of its failure arms this way.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "tests/integration/cluster.h"

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

}  // namespace
}  // namespace diloco::testing
