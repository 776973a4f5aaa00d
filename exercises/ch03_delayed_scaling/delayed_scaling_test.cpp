// delayed_scaling_update against the project's DelayedScaler (ch03_master_weights/
// fp8_scaling.h, Transformer Engine's rule): the same history and the same scale, bit for bit,
// step after step, and the cases where the previous scale must stay.
#include "ch03_delayed_scaling/delayed_scaling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "ch03_master_weights/fp8_scaling.h"

namespace mixpar::exercises {
namespace {

// The project's scaler after a step whose tensor has amax `a`.
void project_step(fp8::DelayedScaler& s, float a) {
  const std::vector<float> x = {a};
  s.quantize(x, 1, 1);
  s.update();
}

TEST(DelayedScaling, FollowsTheProjectsScalerStepByStep) {
  for (int margin : {0, 2}) {
    fp8::DelayedScaler ref(DType::kE4M3, 4, margin);
    std::vector<float> history(4, 0.0f);
    float scale = 1.0f;
    std::mt19937 g(3);
    std::lognormal_distribution<float> d(0, 2);
    for (int step = 0; step < 40; ++step) {
      const float a = step == 17 ? 1000 * d(g) : d(g);  // one spike: it must rule for 4 steps
      project_step(ref, a);
      scale = delayed_scaling_update(history, a, scale, 448.0f, margin);
      ASSERT_EQ(history, ref.history()) << "step " << step;
      ASSERT_EQ(scale, ref.scale()) << "step " << step << ", margin " << margin;
    }
  }
}

TEST(DelayedScaling, TheSpikeRulesForTheHistorysLength) {
  std::vector<float> history(3, 0.0f);
  float s = delayed_scaling_update(history, 2.0f, 1.0f, 448.0f, 0);
  EXPECT_EQ(s, 224.0f);
  s = delayed_scaling_update(history, 100.0f, s, 448.0f, 0);
  EXPECT_EQ(s, 4.48f);
  s = delayed_scaling_update(history, 2.0f, s, 448.0f, 0);
  s = delayed_scaling_update(history, 2.0f, s, 448.0f, 0);
  EXPECT_EQ(s, 4.48f);  // still in the history
  s = delayed_scaling_update(history, 2.0f, s, 448.0f, 0);
  EXPECT_EQ(s, 224.0f);
}

TEST(DelayedScaling, KeepsThePreviousScaleWithoutAUsableAmax) {
  std::vector<float> zeros(2, 0.0f);
  EXPECT_EQ(delayed_scaling_update(zeros, 0.0f, 7.0f, 448.0f, 0), 7.0f);
  std::vector<float> h = {1.0f, 1.0f};
  EXPECT_EQ(delayed_scaling_update(h, std::nanf(""), 7.0f, 448.0f, 0), 7.0f);
  std::vector<float> i = {1.0f, 1.0f};
  EXPECT_EQ(delayed_scaling_update(i, std::numeric_limits<float>::infinity(), 7.0f, 448.0f, 0),
            7.0f);
  std::vector<float> tiny = {0.0f};
  EXPECT_EQ(delayed_scaling_update(tiny, 1e-45f, 1.0f, 57344.0f, 0),
            std::numeric_limits<float>::max());
}

}  // namespace
}  // namespace mixpar::exercises
