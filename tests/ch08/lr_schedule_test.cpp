// The learning-rate schedule: linear warmup reaching the peak at its last step, cosine from the
// peak to min_lr at the last step (half-way value exactly the mean), constant after warmup.
#include "lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "util/errors.h"

namespace mixpar::ch08 {
namespace {

TEST(LrSchedule, WarmupIsLinearFromLrOverWarmupToLr) {
  const LrSchedule s{LrScheduleKind::kCosine, 1e-3, 1e-4, 10, 110};
  for (int step = 0; step < 10; ++step) {
    EXPECT_DOUBLE_EQ(s.at(step), 1e-3 * (step + 1) / 10.0) << "step " << step;
  }
  EXPECT_DOUBLE_EQ(s.at(9), 1e-3);  // the peak is reached on the last warmup step
}

TEST(LrSchedule, CosineFallsFromLrToMinLrAtTheLastStep) {
  const LrSchedule s{LrScheduleKind::kCosine, 1e-3, 1e-4, 10, 111};  // decay over steps 10..110
  EXPECT_DOUBLE_EQ(s.at(10), 1e-3);
  EXPECT_DOUBLE_EQ(s.at(60), 0.5 * (1e-3 + 1e-4));  // half-way: cos(pi/2) = 0
  EXPECT_NEAR(s.at(35), 1e-4 + 0.9e-3 * 0.5 * (1 + std::cos(std::numbers::pi * 0.25)), 1e-18);
  EXPECT_DOUBLE_EQ(s.at(110), 1e-4);
  EXPECT_DOUBLE_EQ(s.at(500), 1e-4);  // past the end (a run extended on resume) stays at min
  for (int step = 11; step <= 110; ++step) EXPECT_LT(s.at(step), s.at(step - 1));
}

TEST(LrSchedule, ConstantHoldsTheLrAfterWarmup) {
  const LrSchedule s{LrScheduleKind::kConstant, 3e-4, 0.0, 4, 100};
  EXPECT_DOUBLE_EQ(s.at(0), 0.75e-4);
  for (int step : {3, 4, 50, 99}) EXPECT_DOUBLE_EQ(s.at(step), 3e-4);
}

TEST(LrSchedule, NoWarmupStartsAtThePeak) {
  const LrSchedule s{LrScheduleKind::kCosine, 1e-3, 0.0, 0, 3};
  EXPECT_DOUBLE_EQ(s.at(0), 1e-3);
  EXPECT_DOUBLE_EQ(s.at(1), 0.5e-3);
  EXPECT_DOUBLE_EQ(s.at(2), 0.0);
}

TEST(LrSchedule, ParsesItsNames) {
  EXPECT_EQ(parse_lr_schedule("cosine"), LrScheduleKind::kCosine);
  EXPECT_EQ(parse_lr_schedule("constant"), LrScheduleKind::kConstant);
  EXPECT_THROW(parse_lr_schedule("linear"), InputError);
}

}  // namespace
}  // namespace mixpar::ch08
