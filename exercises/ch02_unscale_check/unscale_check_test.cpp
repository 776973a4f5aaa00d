// unscale_and_check against chapter 2's LossScaler::unscale_and_check (GradScaler.unscale_) on
// the same gradients: the same found_inf, the same unscaled bits, for powers of two and for
// scales whose reciprocal FP32 cannot hold exactly.
#include "ch02_unscale_check/unscale_check.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "ch02_loss_scaling/loss_scaler.h"

namespace mixpar::exercises {
namespace {

std::vector<std::vector<float>> random_grads(std::uint32_t seed, float scale) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 1e-3f);
  std::vector<std::vector<float>> grads;
  for (int size : {7, 64, 129}) {
    std::vector<float> g(static_cast<std::size_t>(size));
    for (float& v : g) v = normal(gen) * scale;
    grads.push_back(std::move(g));
  }
  return grads;
}

// Runs both on copies of grads; compares found_inf and every element's bits (NaN as NaN).
void expect_same_as_the_scaler(const std::vector<std::vector<float>>& grads, float scale) {
  std::vector<std::vector<float>> mine = grads;
  const bool found = unscale_and_check(mine, scale);
  std::vector<Tensor> tensors;
  for (const std::vector<float>& g : grads) {
    tensors.push_back(Tensor::from_floats(g, {static_cast<std::int64_t>(g.size())}));
  }
  ch02::LossScaler scaler(ch02::static_config(scale));
  const bool want = scaler.unscale_and_check(tensors);
  EXPECT_EQ(found, want) << "scale " << scale;
  ASSERT_EQ(mine.size(), grads.size());
  for (std::size_t t = 0; t < grads.size(); ++t) {
    const std::vector<float> ref = tensors[t].to_floats();
    ASSERT_EQ(mine[t].size(), ref.size());
    for (std::size_t i = 0; i < ref.size(); ++i) {
      if (std::isnan(ref[i])) {
        EXPECT_TRUE(std::isnan(mine[t][i])) << "tensor " << t << " element " << i;
      } else {
        ASSERT_EQ(std::bit_cast<std::uint32_t>(mine[t][i]), std::bit_cast<std::uint32_t>(ref[i]))
            << "scale " << scale << ", tensor " << t << " element " << i << ": got "
            << mine[t][i] << ", want " << ref[i];
      }
    }
  }
}

TEST(UnscaleAndCheck, DividesCleanGradientsByAPowerOfTwoScale) {
  std::vector<std::vector<float>> g = {{65536.0f, -32768.0f}, {3.0f * 65536.0f}};
  EXPECT_FALSE(unscale_and_check(g, 65536.0f));
  EXPECT_EQ(g[0][0], 1.0f);
  EXPECT_EQ(g[0][1], -0.5f);
  EXPECT_EQ(g[1][0], 3.0f);
}

TEST(UnscaleAndCheck, FindsAnInfOrNaNInAnyTensor) {
  std::vector<std::vector<float>> g = random_grads(1, 1024.0f);
  g[2][100] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(unscale_and_check(g, 1024.0f));
  g = random_grads(2, 1024.0f);
  g[0][3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(unscale_and_check(g, 1024.0f));
}

TEST(UnscaleAndCheck, MultipliesByTheRoundedReciprocal) {
  // 1/1000 and 1/3 are not FP32 numbers: x * fl(1/s) differs from x / s in some elements.
  for (float scale : {1000.0f, 3.0f, 0.75f}) expect_same_as_the_scaler(random_grads(3, scale), scale);
}

TEST(UnscaleAndCheck, EqualsTheLossScalerOnCleanAndOverflowedSteps) {
  std::uint32_t seed = 10;
  for (float scale : {65536.0f, 0x1p24f, 1.0f, 0.5f, 12345.0f}) {
    std::vector<std::vector<float>> g = random_grads(seed++, scale);
    expect_same_as_the_scaler(g, scale);
    g[1][5] = -std::numeric_limits<float>::infinity();
    expect_same_as_the_scaler(g, scale);
  }
}

}  // namespace
}  // namespace mixpar::exercises
