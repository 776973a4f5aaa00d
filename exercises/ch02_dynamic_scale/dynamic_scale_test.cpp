// update_scale against chapter 2's LossScaler with PyTorch's rules, on scripted and random
// overflow sequences: the same scale, the same tracker, the same skipped steps.
#include "ch02_dynamic_scale/dynamic_scale.h"

#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "ch02_loss_scaling/loss_scaler.h"

namespace mixpar::exercises {
namespace {

void expect_same_trajectory(const std::vector<bool>& overflows, std::int64_t interval) {
  ch02::LossScalerConfig c = ch02::pytorch_config();
  c.growth_interval = interval;
  ch02::LossScaler ref(c);
  DynamicScale mine;
  for (std::size_t i = 0; i < overflows.size(); ++i) {
    const bool ref_taken = ref.update(overflows[i]);
    const bool taken = update_scale(mine, overflows[i], interval);
    ASSERT_EQ(taken, ref_taken) << "step " << i;
    ASSERT_EQ(mine.scale, ref.scale()) << "step " << i;
    ASSERT_EQ(mine.growth_tracker, ref.state().growth_tracker) << "step " << i;
  }
}

TEST(UpdateScale, SkipsAndHalvesOnOverflow) {
  DynamicScale s;
  EXPECT_FALSE(update_scale(s, true, 2000));
  EXPECT_EQ(s.scale, 32768.0f);
  EXPECT_EQ(s.growth_tracker, 0);
}

TEST(UpdateScale, DoublesAfterGrowthIntervalCleanSteps) {
  DynamicScale s;
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(update_scale(s, false, 5));
  EXPECT_EQ(s.scale, 65536.0f);
  EXPECT_TRUE(update_scale(s, false, 5));
  EXPECT_EQ(s.scale, 131072.0f);
  EXPECT_EQ(s.growth_tracker, 0);
}

TEST(UpdateScale, AnOverflowRestartsTheCount) {
  expect_same_trajectory({false, false, false, true, false, false, false, false, false}, 4);
}

TEST(UpdateScale, NeverGrowsToInfinity) {
  // 2^126 still doubles to 2^127, FP32's largest power of two; 2^128 would be inf, so the
  // next growth is refused (the scale stays, the tracker restarts). Starting below the edge
  // keeps a blank update_scale, which never grows, from passing.
  DynamicScale s{.scale = 0x1p126f, .growth_tracker = 0};
  EXPECT_TRUE(update_scale(s, false, 1));
  EXPECT_EQ(s.scale, 0x1p127f);
  EXPECT_TRUE(update_scale(s, false, 1));
  EXPECT_EQ(s.scale, 0x1p127f);
  EXPECT_EQ(s.growth_tracker, 0);
}

TEST(UpdateScale, EqualsTheLossScalerOnRandomOverflows) {
  std::mt19937 gen(5);
  std::bernoulli_distribution overflow(0.1);
  std::vector<bool> seq(3000);
  for (std::size_t i = 0; i < seq.size(); ++i) seq[i] = overflow(gen);
  expect_same_trajectory(seq, 7);
}

}  // namespace
}  // namespace mixpar::exercises
