// LossScaler: scripted overflow/clean sequences give the exact scale trajectories of PyTorch's
// GradScaler and of Megatron/DeepSpeed hysteresis, with cap and floor; unscaling follows
// unscale_ (1/scale in FP64, FP32 grads only, once per step); state round-trips exactly.
#include "ch02_loss_scaling/loss_scaler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include "util/errors.h"

namespace mixpar::ch02 {
namespace {

// Runs `script` ('x' = overflow, '.' = clean) and returns the scale after each update.
std::vector<float> trajectory(LossScaler& s, const char* script) {
  std::vector<float> out;
  for (const char* p = script; *p; ++p) {
    s.update(*p == 'x');
    out.push_back(s.scale());
  }
  return out;
}

LossScalerConfig small(double init, std::int64_t interval, int hysteresis = 1) {
  LossScalerConfig c;
  c.init_scale = init;
  c.growth_interval = interval;
  c.hysteresis = hysteresis;
  return c;
}

TEST(LossScaler, PyTorchDefaults) {
  const LossScaler s;
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_EQ(s.config().growth_interval, 2000);
  EXPECT_EQ(s.config().growth_factor, 2.0);
  EXPECT_EQ(s.config().backoff_factor, 0.5);
  EXPECT_EQ(s.config().hysteresis, 1);
  EXPECT_TRUE(std::isinf(s.config().max_scale));
}

TEST(LossScaler, GrowsExactlyOnThe2000thConsecutiveCleanStep) {
  LossScaler s;  // PyTorch defaults: 2000
  for (int i = 0; i < 1999; ++i) ASSERT_TRUE(s.update(false));
  EXPECT_EQ(s.scale(), 65536.0f);
  EXPECT_EQ(s.state().growth_tracker, 1999);
  s.update(false);
  EXPECT_EQ(s.scale(), 131072.0f);
  EXPECT_EQ(s.state().growth_tracker, 0);  // reset on growth
}

TEST(LossScaler, ScriptedTrajectoryWithoutHysteresisIsPyTorchs) {
  LossScaler s(small(1024, 3));
  // grow on the 3rd clean step; halve on each overflow, restarting the streak; two
  // overflows in a row halve twice (no hysteresis); three clean steps grow again.
  EXPECT_EQ(
      trajectory(s, "...x..x.xx..."),
      (std::vector<float>{1024, 1024, 2048, 1024, 1024, 1024, 512, 512, 256, 128, 128, 128, 256}));
  EXPECT_EQ(s.state().steps_skipped, 4);
  EXPECT_EQ(s.state().steps_taken, 9);
}

TEST(LossScaler, OverflowSkipsTheStepAndResetsTheGrowthTracker) {
  LossScaler s(small(1024, 3));
  EXPECT_TRUE(s.update(false));
  EXPECT_TRUE(s.update(false));
  EXPECT_EQ(s.state().growth_tracker, 2);
  EXPECT_FALSE(s.update(true));
  EXPECT_EQ(s.state().growth_tracker, 0);
  EXPECT_EQ(s.scale(), 512.0f);
}

TEST(LossScaler, HysteresisTwoDropsOnlyOnTheSecondOverflowSinceTheLastGrowth) {
  LossScaler s(small(1024, 4, /*hysteresis=*/2));
  // x: tolerated (hysteresis 2 -> 1), skipped; clean steps do NOT refill it (Megatron,
  // DeepSpeed consecutive_hysteresis=False); the next x drops; the one after drops again.
  EXPECT_EQ(trajectory(s, "x..x.x"), (std::vector<float>{1024, 1024, 1024, 512, 512, 256}));
  EXPECT_EQ(s.state().steps_skipped, 3);  // every overflow step is skipped, tolerated or not
  EXPECT_EQ(s.state().hysteresis_left, 0);
  // Growth refills it: four clean steps grow, then one overflow is tolerated again.
  EXPECT_EQ(trajectory(s, "....x"), (std::vector<float>{256, 256, 256, 512, 512}));
  EXPECT_EQ(s.state().hysteresis_left, 1);
}

TEST(LossScaler, ConsecutiveHysteresisRefillsOnEveryCleanStep) {
  LossScalerConfig c = small(1024, 100, 2);
  c.consecutive_hysteresis = true;  // DeepSpeed's option: only overflows in a row count
  LossScaler s(c);
  EXPECT_EQ(trajectory(s, "x.x.x.xx"),
            (std::vector<float>{1024, 1024, 1024, 1024, 1024, 1024, 1024, 512}));
}

TEST(LossScaler, CapStopsGrowthAndFloorStopsBackoff) {
  LossScalerConfig c = small(4, 1);
  c.max_scale = 16;  // article A's practice (2^24 there, docs/SOURCES.md), scaled down
  c.min_scale = 2;   // DeepSpeed/Megatron floor (1 there)
  LossScaler s(c);
  EXPECT_EQ(trajectory(s, "....xxxx."), (std::vector<float>{8, 16, 16, 16, 8, 4, 2, 2, 4}));
}

TEST(LossScaler, MegatronAndDeepSpeedPresets) {
  const LossScalerConfig m = megatron_config();
  EXPECT_EQ(m.init_scale, 4294967296.0);
  EXPECT_EQ(m.growth_interval, 1000);
  EXPECT_EQ(m.hysteresis, 2);
  EXPECT_EQ(m.min_scale, 1.0);
  const LossScalerConfig d = deepspeed_config();
  EXPECT_EQ(d.init_scale, 65536.0);
  EXPECT_EQ(d.growth_interval, 1000);
  EXPECT_EQ(d.hysteresis, 2);
  EXPECT_FALSE(d.consecutive_hysteresis);
}

TEST(LossScaler, StaticScaleNeverMovesButStillSkipsOverflowSteps) {
  LossScaler s(static_config(1024));
  EXPECT_EQ(trajectory(s, "x...x....."), std::vector<float>(10, 1024.0f));
  EXPECT_EQ(s.state().steps_skipped, 2);
}

TEST(LossScaler, NoScalingTakesEveryStepAndChecksNothing) {
  LossScaler s(no_scaling_config());
  Tensor g = Tensor::from_floats(std::vector<float>{1.0f, INFINITY}, {2});
  const Tensor grads[] = {g};
  EXPECT_FALSE(s.unscale_and_check(grads));  // GradScaler(enabled=False) does nothing
  EXPECT_TRUE(s.update(true));
  EXPECT_EQ(s.scale(), 1.0f);
}

TEST(LossScaler, UnscaleMultipliesByFp64ReciprocalRoundedToFp32) {
  LossScalerConfig c = static_config(3.0);  // 1/3 is where FP32 and FP64 reciprocals differ
  LossScaler s(c);
  EXPECT_EQ(s.inv_scale(), static_cast<float>(1.0 / 3.0));
  Tensor g = Tensor::from_floats(std::vector<float>{3.0f, 6.0f, 0.75f}, {3});
  const Tensor grads[] = {g};
  EXPECT_FALSE(s.unscale_and_check(grads));
  const float inv = static_cast<float>(1.0 / 3.0);
  EXPECT_EQ(g.to_floats(), (std::vector<float>{3.0f * inv, 6.0f * inv, 0.75f * inv}));
}

TEST(LossScaler, UnscaleFindsInfAndNaN) {
  LossScaler s(static_config(8));
  Tensor a = Tensor::from_floats(std::vector<float>{1, 2}, {2});
  Tensor b = Tensor::from_floats(std::vector<float>{NAN, 2}, {2});
  const Tensor grads[] = {a, b};
  EXPECT_TRUE(s.unscale_and_check(grads));
  EXPECT_FALSE(s.update(true));
}

TEST(LossScaler, UnscaleTwiceBeforeUpdateIsAnError) {
  LossScaler s;
  Tensor g = Tensor::from_floats(std::vector<float>{1.0f}, {1});
  const Tensor grads[] = {g};
  s.unscale_and_check(grads);
  EXPECT_THROW(s.unscale_and_check(grads), std::logic_error);
  s.update(false);
  EXPECT_NO_THROW(s.unscale_and_check(grads));  // a new step may unscale again
}

TEST(LossScaler, UnscalingFp16GradientsIsRefused) {
  LossScaler s;
  Tensor g = Tensor::from_floats(std::vector<float>{1.0f}, {1}, DType::kF16);
  const Tensor grads[] = {g};
  EXPECT_THROW(s.unscale_and_check(grads), std::invalid_argument);
}

TEST(LossScaler, StateRoundTripsThroughJsonAndResumesTheSameTrajectory) {
  LossScaler a(small(1024, 3, 2));
  trajectory(a, "..x..");
  const Json saved = Json::parse(state_to_json(a.state()).dump());
  LossScaler b(small(1024, 3, 2));
  b.load_state(state_from_json(saved));
  EXPECT_EQ(b.state(), a.state());
  EXPECT_EQ(trajectory(b, ".x..x...."), trajectory(a, ".x..x...."));
}

TEST(LossScaler, BadConfigAndBadStateAreInputErrors) {
  LossScalerConfig c;
  c.growth_factor = 1.0;
  EXPECT_THROW(LossScaler{c}, InputError);
  c = LossScalerConfig{};
  c.init_scale = 1e39;  // not a finite FP32 value
  EXPECT_THROW(LossScaler{c}, InputError);
  c = LossScalerConfig{};
  c.hysteresis = 0;
  EXPECT_THROW(LossScaler{c}, InputError);
  LossScaler s;
  LossScalerState bad = s.state();
  bad.scale = -1.0f;
  EXPECT_THROW(s.load_state(bad), InputError);
  bad = s.state();
  bad.growth_tracker = 2000;
  EXPECT_THROW(s.load_state(bad), InputError);
}

TEST(LossScaler, GrowthNeverReachesInfinity) {
  LossScalerConfig c = small(0x1p127, 1);
  LossScaler s(c);
  s.update(false);
  EXPECT_EQ(s.scale(), 0x1p127f);  // 2^128 is inf in FP32: PyTorch keeps the old scale
}

// Unscaling multiplies by 1/scale in FP32: below 2^-128 that is infinite and 0 x inf = NaN
// reached the optimizer unseen. Such scales are refused, and backoff stops above them.
TEST(LossScaler, EveryScaleHasAFiniteInverse) {
  EXPECT_FALSE(has_finite_inverse(0x1p-128f));
  EXPECT_TRUE(has_finite_inverse(min_loss_scale()));
  EXPECT_GT(min_loss_scale(), 0x1p-128f);
  EXPECT_LT(min_loss_scale(), 2.94e-39f);
  for (double bad : {1e-39, 1e-320, 2.9e-39}) {
    LossScalerConfig c;
    c.init_scale = bad;
    EXPECT_THROW(LossScaler{c}, InputError) << bad;
  }
  LossScalerConfig c = small(static_cast<double>(min_loss_scale()) * 4, 1);
  LossScaler s(c);
  for (int i = 0; i < 10; ++i) s.update(true);
  EXPECT_EQ(s.scale(), min_loss_scale());
  EXPECT_TRUE(std::isfinite(s.inv_scale()));
  LossScalerState tiny = s.state();
  tiny.scale = 0x1p-128f;
  EXPECT_THROW(s.load_state(tiny), InputError);
}

// The found-inf check reads the unscaled gradients, the optimizer's: a finite scaled gradient
// that overflows once multiplied by 1/scale (a scale below 1) is found, and zeros stay zeros.
TEST(LossScaler, TheCheckSeesTheUnscaledGradients) {
  LossScaler s(static_config(0x1p-10));
  Tensor g = Tensor::from_floats(std::vector<float>{3e36f, 0.0f}, {2});
  const Tensor grads[] = {g};
  EXPECT_TRUE(s.unscale_and_check(grads));
  s.update(true);
  LossScaler t(static_config(static_cast<double>(min_loss_scale())));
  Tensor zeros = Tensor::from_floats(std::vector<float>{0.0f, -0.0f}, {2});
  const Tensor zero_grads[] = {zeros};
  EXPECT_FALSE(t.unscale_and_check(zero_grads));
  EXPECT_EQ(zeros.to_floats(), (std::vector<float>{0.0f, -0.0f}));
}

}  // namespace
}  // namespace mixpar::ch02
