// clip_coefficient against common/optim's (PyTorch's rule), and the clipping-order mistake
// it exists to avoid: the coefficient of a scaled norm clips 1024 times too hard.
#include "ch03_clip_coefficient/clip_coefficient.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "optim/clip.h"

namespace mixpar::exercises {
namespace {

TEST(ClipCoefficient, IsOneBelowMaxNorm) {
  EXPECT_EQ(clip_coefficient(0.5, 1.0), 1.0);
  EXPECT_EQ(clip_coefficient(0.0, 1.0), 1.0);
}

TEST(ClipCoefficient, ScalesDownAboveMaxNorm) {
  EXPECT_DOUBLE_EQ(clip_coefficient(4.0, 1.0), 1.0 / (4.0 + 1e-6));
  for (double n : {1.5, 3.0, 10.0, 1e6}) {
    EXPECT_EQ(clip_coefficient(n, 1.0), mixpar::clip_coefficient(n, 1.0)) << n;
  }
}

TEST(ClipCoefficient, KeepsNaNAndClipsInfinityToZero) {
  EXPECT_TRUE(std::isnan(clip_coefficient(std::numeric_limits<double>::quiet_NaN(), 1.0)));
  EXPECT_EQ(clip_coefficient(std::numeric_limits<double>::infinity(), 1.0), 0.0);
}

TEST(ClipCoefficient, OnAScaledNormClipsScaleTimesTooHard) {
  const double true_norm = 2.647, scale = 1024, max_norm = 3;
  EXPECT_EQ(clip_coefficient(true_norm, max_norm), 1.0);  // no clipping needed
  EXPECT_LT(clip_coefficient(scale * true_norm, max_norm), 2e-3);
}

}  // namespace
}  // namespace mixpar::exercises
