// The learning-rate schedule of a worker's run (worker/model/lr_schedule.h) and the trainer's
// SetLearningRate, which the worker drives it through.
#include "worker/model/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "gtest/gtest.h"
#include "worker/model/cpu_trainer.h"
#include "worker/model/presets.h"
#include "worker/model/trainer_options.h"

namespace diloco::model {
namespace {

using Shape = LrSchedule::Shape;

LrSchedule Make(std::string_view name, int warmup, int64_t steps, absl::Duration duration) {
  absl::StatusOr<LrSchedule> s = MakeLrSchedule(name, 0.01f, warmup, 0.1f, steps, duration);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.value_or(LrSchedule{});
}

TEST(LrScheduleTest, AutoDecaysOnlyWhenTheRunIsBounded) {
  EXPECT_EQ(Make("auto", 0, 0, absl::InfiniteDuration()).shape, Shape::kConstant);
  EXPECT_EQ(Make("auto", 0, 100, absl::InfiniteDuration()).shape, Shape::kCosine);
  EXPECT_EQ(Make("auto", 0, 0, absl::Seconds(60)).shape, Shape::kCosine);
  EXPECT_EQ(Make("constant", 0, 100, absl::Seconds(60)).shape, Shape::kConstant);
}

TEST(LrScheduleTest, CosineOverStepsFromPeakToTheFloor) {
  const LrSchedule s = Make("cosine", 0, 1000, absl::InfiniteDuration());
  EXPECT_FLOAT_EQ(LrAt(s, 1, absl::ZeroDuration()),
                  0.001f + 0.009f * 0.5f * (1 + std::cos(M_PI / 1000)));
  EXPECT_NEAR(LrAt(s, 500, absl::Hours(9)), 0.0055f, 1e-7);  // time plays no part
  EXPECT_FLOAT_EQ(LrAt(s, 1000, absl::ZeroDuration()), 0.001f);
  EXPECT_FLOAT_EQ(LrAt(s, 1500, absl::ZeroDuration()), 0.001f);  // past the bound: the floor
  float prev = 1;
  for (int64_t step = 1; step <= 1000; ++step) {  // never rises
    const float lr = LrAt(s, step, absl::ZeroDuration());
    ASSERT_LE(lr, prev) << step;
    prev = lr;
  }
}

TEST(LrScheduleTest, CosineOverTimeFollowsTheClockWhateverTheSteps) {
  const LrSchedule s = Make("auto", 0, 0, absl::Seconds(60));
  EXPECT_NEAR(LrAt(s, 10, absl::Seconds(30)), 0.0055f, 1e-7);
  EXPECT_NEAR(LrAt(s, 100000, absl::Seconds(30)), 0.0055f, 1e-7);
  EXPECT_FLOAT_EQ(LrAt(s, 10, absl::Seconds(60)), 0.001f);
  EXPECT_NEAR(LrAt(s, 10, absl::Seconds(15)), 0.001f + 0.009f * 0.5f * (1 + std::cos(M_PI / 4)),
              1e-7);
}

TEST(LrScheduleTest, WithBothBoundsTheOneNearerItsEndDecides) {
  const LrSchedule s = Make("cosine", 0, 1000, absl::Seconds(60));
  EXPECT_NEAR(LrAt(s, 500, absl::Seconds(6)), 0.0055f, 1e-7);   // steps: half, time: a tenth
  EXPECT_NEAR(LrAt(s, 100, absl::Seconds(30)), 0.0055f, 1e-7);  // steps: a tenth, time: half
}

TEST(LrScheduleTest, WsdHoldsThePeakThenDecaysLinearlyOverTheCooldown) {
  absl::StatusOr<LrSchedule> s =
      MakeLrSchedule("wsd", 0.01f, 0, 0.1f, 1000, absl::InfiniteDuration(), 0.25);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->shape, Shape::kWsd);
  EXPECT_FLOAT_EQ(LrAt(*s, 1, absl::ZeroDuration()), 0.01f);
  EXPECT_FLOAT_EQ(LrAt(*s, 750, absl::ZeroDuration()), 0.01f);
  EXPECT_NEAR(LrAt(*s, 875, absl::ZeroDuration()), 0.0055f, 1e-7);  // half-way down
  EXPECT_FLOAT_EQ(LrAt(*s, 1000, absl::ZeroDuration()), 0.001f);
  EXPECT_FLOAT_EQ(LrAt(*s, 2000, absl::ZeroDuration()), 0.001f);
  absl::StatusOr<LrSchedule> timed =
      MakeLrSchedule("wsd", 0.01f, 0, 0.1f, 0, absl::Seconds(100), 0.25);
  ASSERT_TRUE(timed.ok()) << timed.status();
  EXPECT_NEAR(LrAt(*timed, 5, absl::Seconds(87.5)), 0.0055f, 1e-7);
  EXPECT_FALSE(MakeLrSchedule("wsd", 0.01f, 0, 0.1f, 0, absl::InfiniteDuration()).ok());
  for (double bad : {0.0, -0.5, 1.5}) {
    absl::StatusOr<LrSchedule> b =
        MakeLrSchedule("wsd", 0.01f, 0, 0.1f, 1000, absl::InfiniteDuration(), bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_NE(std::string(b.status().message()).find("--lr_cooldown"), std::string::npos);
  }
  EXPECT_EQ(Describe(*s), "lr 0.01 wsd: linear to 0.1x over the last 0.25 of 1000 steps");
}

TEST(LrScheduleTest, WarmUpRampsLinearlyThenTheShapeTakesOver) {
  const LrSchedule c = Make("constant", 10, 0, absl::InfiniteDuration());
  EXPECT_FLOAT_EQ(LrAt(c, 1, absl::ZeroDuration()), 0.001f);
  EXPECT_FLOAT_EQ(LrAt(c, 5, absl::ZeroDuration()), 0.005f);
  EXPECT_FLOAT_EQ(LrAt(c, 10, absl::ZeroDuration()), 0.01f);
  EXPECT_FLOAT_EQ(LrAt(c, 11, absl::ZeroDuration()), 0.01f);
  const LrSchedule s = Make("cosine", 10, 1000, absl::InfiniteDuration());
  EXPECT_FLOAT_EQ(LrAt(s, 5, absl::ZeroDuration()), 0.005f);
  EXPECT_FLOAT_EQ(LrAt(s, 1000, absl::ZeroDuration()), 0.001f);
}

TEST(LrScheduleTest, BadSettingsAreRefusedNamingTheFlag) {
  struct Case {
    std::string_view name;
    float peak;
    int warmup;
    float min_fraction;
    int64_t steps;
    absl::Duration duration;
    const char* says;
  };
  const Case cases[] = {
      {"cosine", 0.01f, 0, 0.1f, 0, absl::InfiniteDuration(), "bounded run"},
      {"linear", 0.01f, 0, 0.1f, 10, absl::InfiniteDuration(), "--lr_schedule=linear"},
      {"auto", 0.0f, 0, 0.1f, 10, absl::InfiniteDuration(), "--lr="},
      {"auto", 0.01f, -1, 0.1f, 10, absl::InfiniteDuration(), "--warmup_steps"},
      {"auto", 0.01f, 0, 1.5f, 10, absl::InfiniteDuration(), "--min_lr_fraction"},
      {"auto", 0.01f, 0, 0.1f, -5, absl::InfiniteDuration(), "--steps"},
      {"auto", 0.01f, 0, 0.1f, 0, absl::Seconds(-1), "--duration"},
  };
  for (const Case& c : cases) {
    absl::StatusOr<LrSchedule> s =
        MakeLrSchedule(c.name, c.peak, c.warmup, c.min_fraction, c.steps, c.duration);
    ASSERT_FALSE(s.ok()) << c.says;
    EXPECT_NE(std::string(s.status().message()).find(c.says), std::string::npos) << s.status();
  }
}

TEST(LrScheduleTest, DescribeNamesTheShapeAndTheBound) {
  EXPECT_EQ(Describe(Make("auto", 0, 0, absl::InfiniteDuration())), "lr 0.01 constant");
  EXPECT_EQ(Describe(Make("auto", 20, 1500, absl::InfiniteDuration())),
            "lr 0.01 warm-up 20 steps cosine to 0.1x over 1500 steps");
  EXPECT_EQ(Describe(Make("auto", 0, 0, absl::Seconds(60))), "lr 0.01 cosine to 0.1x over 1m");
}

// The options' own step schedule (used when nothing calls SetLearningRate) keeps its shape.
TEST(LrScheduleTest, TheOptionsScheduleRampsAndDecaysByStep) {
  TrainerOptions o;
  o.adamw.lr = 0.01f;
  o.warmup_steps = 10;
  o.decay_steps = 110;
  o.min_lr_fraction = 0.1f;
  EXPECT_FLOAT_EQ(LearningRate(o, 5), 0.005f);
  EXPECT_FLOAT_EQ(LearningRate(o, 10), 0.01f);
  EXPECT_NEAR(LearningRate(o, 60), 0.0055f, 1e-7);
  EXPECT_FLOAT_EQ(LearningRate(o, 110), 0.001f);
  EXPECT_FLOAT_EQ(LearningRate(o, 500), 0.001f);
  o.decay_steps = 0;
  EXPECT_FLOAT_EQ(LearningRate(o, 500), 0.01f);
}

// SetLearningRate replaces the options' schedule: at rate 0 AdamW (weight decay included)
// leaves every parameter as it was; at the options' rate the step moves them.
TEST(LrScheduleTest, TheTrainerStepsWithTheRateItIsGiven) {
  TrainerOptions o = CiTrainingOptions();
  absl::StatusOr<std::unique_ptr<Trainer>> t = MakeCpuTrainer(o);
  ASSERT_TRUE(t.ok()) << t.status();
  Trainer& tr = **t;
  const std::vector<float> before(tr.params().begin(), tr.params().end());
  tr.SetLearningRate(0.0f);
  tr.Step();
  tr.Step();
  EXPECT_TRUE(std::equal(before.begin(), before.end(), tr.params().begin()));
  tr.SetLearningRate(o.adamw.lr);
  tr.Step();
  EXPECT_FALSE(std::equal(before.begin(), before.end(), tr.params().begin()));
}

}  // namespace
}  // namespace diloco::model
