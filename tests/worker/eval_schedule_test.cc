// diloco-worker's periodic evaluation (worker/eval_schedule.h): at the multiples of the period,
// or, for an aligned asynchronous worker, at the first adoption of fragment 0 from the due step.
#include "worker/eval_schedule.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace diloco::worker {
namespace {

// The steps at which `s` evaluates over `steps` steps, fragment 0's version after step i being
// version(i) (read only when the schedule watches).
std::vector<int64_t> Evaluations(EvalSchedule s, int64_t steps,
                                 const std::function<uint64_t(int64_t)>& version) {
  std::vector<int64_t> at;
  for (int64_t i = 1; i <= steps; ++i)
    if (s.Now(i, s.Watching(i) ? version(i) : 0)) at.push_back(i);
  return at;
}

// A new version of fragment 0 every 50 steps, adopted at steps 17, 67, 117, ...
uint64_t EveryFifty(int64_t step) {
  return step < 17 ? 0 : 1 + static_cast<uint64_t>(step - 17) / 50;
}

TEST(EvalScheduleTest, AtTheMultiplesWithoutAdoption) {
  EXPECT_EQ(Evaluations(EvalSchedule(100, false), 350, EveryFifty),
            (std::vector<int64_t>{100, 200, 300}));
  EXPECT_TRUE(Evaluations(EvalSchedule(0, true), 350, EveryFifty).empty());
}

TEST(EvalScheduleTest, AResumedWorkerEvaluatesAtTheMultiplesAfterItsStart) {
  // Resumed at step 1000 (its first step 1001): the next multiple is 1100, not the first step.
  EvalSchedule s(100, false, 1001);
  std::vector<int64_t> at;
  for (int64_t i = 1001; i <= 1250; ++i)
    if (s.Now(i, 0)) at.push_back(i);
  EXPECT_EQ(at, (std::vector<int64_t>{1100, 1200}));
}

TEST(EvalScheduleTest, AnAlignedWorkerEvaluatesAtItsFirstAdoptionFromTheDueStep) {
  // Due at 100: the next adoption is at 117; due at 200: 217; due at 300: 317.
  EXPECT_EQ(Evaluations(EvalSchedule(100, true), 350, EveryFifty),
            (std::vector<int64_t>{117, 217, 317}));
}

TEST(EvalScheduleTest, AnAdoptionOnTheDueStepCountsAndOneBeforeItDoesNot) {
  // Adoptions at 99 (before the due step: not it) and 150.
  auto v = [](int64_t step) -> uint64_t { return (step >= 99) + (step >= 150); };
  EXPECT_EQ(Evaluations(EvalSchedule(100, true), 199, v), (std::vector<int64_t>{150}));
  // Adopted on step 100 itself.
  auto w = [](int64_t step) -> uint64_t { return step >= 100; };
  EXPECT_EQ(Evaluations(EvalSchedule(100, true), 199, w), (std::vector<int64_t>{100}));
}

TEST(EvalScheduleTest, WithoutAnyAdoptionAnEvaluationWaitsOnePeriodAtMost) {
  auto never = [](int64_t) -> uint64_t { return 3; };
  EXPECT_EQ(Evaluations(EvalSchedule(100, true), 450, never), (std::vector<int64_t>{200, 400}));
}

}  // namespace
}  // namespace diloco::worker
