// FP8 scales (ch03_master_weights/fp8_scaling.h): each recipe's formula as its implementation
// writes it (Transformer Engine's delayed update over an amax history, torchao's
// amax_to_scale, DeepSeek-V3's 1x128 and 128x128 tiles), the saturating cast bit for bit
// against common/numerics, the saturation/flush counters, and the checkpointed state.
#include "ch03_master_weights/fp8_scaling.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "numerics/formats.h"
#include "util/errors.h"
#include "fp8_test_util.h"

namespace mixpar::fp8 {
namespace {

using test_util::normal;

TEST(Fp8Scaling, FormatMaxesComeFromTheFormats) {
  EXPECT_EQ(fp8_max(DType::kE4M3), 448.0f);
  EXPECT_EQ(fp8_max(DType::kE5M2), 57344.0f);
  EXPECT_THROW(fp8_max(DType::kBF16), InputError);
}

TEST(Fp8Scaling, DelayedScaleIsTransformerEnginesFormula) {
  EXPECT_EQ(delayed_scale(2.0f, 1.0f, DType::kE4M3, 0), 224.0f);
  EXPECT_EQ(delayed_scale(2.0f, 1.0f, DType::kE4M3, 1), 112.0f);
  EXPECT_EQ(delayed_scale(3.0f, 1.0f, DType::kE5M2, 0), 57344.0f / 3.0f);
  // No information (amax 0, inf or NaN): the previous scale stays.
  EXPECT_EQ(delayed_scale(0.0f, 5.0f, DType::kE4M3, 0), 5.0f);
  EXPECT_EQ(delayed_scale(std::numeric_limits<float>::infinity(), 5.0f, DType::kE4M3, 0), 5.0f);
  EXPECT_EQ(delayed_scale(std::nanf(""), 5.0f, DType::kE4M3, 0), 5.0f);
  // A quotient beyond FP32 becomes FP32's max.
  EXPECT_EQ(delayed_scale(1e-45f, 1.0f, DType::kE5M2, 0), std::numeric_limits<float>::max());
}

TEST(Fp8Scaling, CurrentScaleIsTorchaosAmaxToScale) {
  EXPECT_EQ(current_scale(3.0f, DType::kE4M3), static_cast<float>(448.0 / double(3.0f)));
  EXPECT_EQ(current_scale(0.0f, DType::kE4M3), static_cast<float>(448.0 / 1e-12));
  EXPECT_EQ(current_scale(0.1f, DType::kE5M2), static_cast<float>(57344.0 / double(0.1f)));
}

TEST(Fp8Scaling, DelayedScalerUsesTheMaxOfTheLastStepsAmaxes) {
  DelayedScaler s(DType::kE4M3, 2, 0);
  EXPECT_EQ(s.scale(), 1.0f);  // Transformer Engine's initial scale
  const auto step = [&](float a) {
    std::vector<float> x = {a, -a / 2};
    s.quantize(x, 1, 2);
    s.update();
  };
  step(1);  // history [0, 1]
  EXPECT_EQ(s.scale(), 448.0f);
  step(4);  // [1, 4]
  EXPECT_EQ(s.scale(), 112.0f);
  step(2);  // [4, 2]: the spike of two steps ago still rules
  EXPECT_EQ(s.scale(), 112.0f);
  step(1);  // [2, 1]: it has left the history
  EXPECT_EQ(s.scale(), 224.0f);
  EXPECT_EQ(s.history(), (std::vector<float>{2, 1}));
  s.update();  // a step with no cast records amax 0: [1, 0]
  EXPECT_EQ(s.scale(), 448.0f);
}

TEST(Fp8Scaling, DelayedScalerCastsWithTheScaleOfBeforeTheStep) {
  DelayedScaler s(DType::kE4M3, 4, 0);
  std::vector<float> x = {1000.0f, 1.0f};
  const Fp8Matrix m = s.quantize(x, 1, 2);  // scale 1: 1000 saturates to 448
  EXPECT_EQ(m.value(0, 0), 448.0f);
  EXPECT_EQ(m.stats.saturated, 1);
  s.update();
  EXPECT_EQ(s.scale(), 448.0f / 1000.0f);
  const Fp8Matrix m2 = s.quantize(x, 1, 2);
  EXPECT_EQ(m2.stats.saturated, 0);
}

TEST(Fp8Scaling, CastEqualsNumericsSaturatingConversionBitForBit) {
  const std::vector<float> x = normal(4096, 1, 3.0f);
  for (DType f : {DType::kE4M3, DType::kE5M2}) {
    const float scale = 17.5f;
    const Fp8Matrix m = quantize_with_scale(x, 64, 64, f, scale);
    for (std::size_t i = 0; i < x.size(); ++i) {
      const std::uint8_t want = f == DType::kE4M3 ? float_to_e4m3_bits(x[i] * scale)
                                                  : float_to_e5m2_bits(x[i] * scale);
      ASSERT_EQ(m.codes[i], want) << i;
    }
    EXPECT_EQ(m.scale_inv[0], 1.0f / scale);
  }
}

TEST(Fp8Scaling, TensorwiseMapsTheAmaxToTheFormatMax) {
  std::vector<float> x = normal(1000, 2);
  x[17] = -7.25f;
  const Fp8Matrix m = quantize_current(x, 10, 100, DType::kE4M3, 10, 100);
  ASSERT_EQ(m.scale.size(), 1u);
  EXPECT_EQ(m.stats.amax, 7.25f);
  EXPECT_EQ(e4m3_bits_to_float(m.codes[17]), -448.0f);
  EXPECT_EQ(m.stats.saturated, 0);
}

TEST(Fp8Scaling, CountersSeeSaturationFlushAndSubnormals) {
  // Scale 1 in E4M3: 500 saturates, 1e-4 flushes (below half of 2^-9), 2^-8 is subnormal.
  const std::vector<float> x = {500.0f, -600.0f, 1e-4f, 0.0f, std::ldexp(1.0f, -8), 1.0f};
  const Fp8Matrix m = quantize_with_scale(x, 1, 6, DType::kE4M3, 1.0f);
  EXPECT_EQ(m.stats.values, 6);
  EXPECT_EQ(m.stats.saturated, 2);
  EXPECT_EQ(m.stats.flushed, 1);  // the exact zero is not counted
  EXPECT_EQ(m.stats.subnormal, 1);
  EXPECT_DOUBLE_EQ(m.stats.saturated_fraction(), 2.0 / 6.0);
}

TEST(Fp8Scaling, BlockwiseGivesEachTileItsOwnScale) {
  // Activations 4 x 256 in 1 x 128 tiles: 8 scales; an outlier moves only its own tile's.
  std::vector<float> x = normal(4 * 256, 3);
  const Fp8Matrix before = quantize_current(x, 4, 256, DType::kE4M3, 1, 128);
  x[2 * 256 + 130] = 1000.0f;  // row 2, tile 1
  const Fp8Matrix after = quantize_current(x, 4, 256, DType::kE4M3, 1, 128);
  ASSERT_EQ(after.scale.size(), 8u);
  for (std::size_t t = 0; t < 8; ++t) {
    if (t == 5) {
      EXPECT_EQ(after.scale[t], current_scale(1000.0f, DType::kE4M3));
    } else {
      EXPECT_EQ(after.scale[t], before.scale[t]) << t;
    }
  }
  // Weights 256 x 256 in 128 x 128 blocks: 4 scales, block (1, 0) from rows 128.. cols ..127.
  std::vector<float> w = normal(256 * 256, 4, 0.02f);
  w[200 * 256 + 5] = 0.5f;
  const Fp8Matrix wb = quantize_current(w, 256, 256, DType::kE4M3, 128, 128);
  ASSERT_EQ(wb.scale.size(), 4u);
  EXPECT_EQ(wb.tile_index(200, 5), 2);
  EXPECT_EQ(wb.scale[2], current_scale(0.5f, DType::kE4M3));
  EXPECT_GT(wb.scale[0], wb.scale[2] * 4);
}

TEST(Fp8Scaling, EdgeTilesAreSmaller) {
  const std::vector<float> x = normal(3 * 200, 5);
  const Fp8Matrix m = quantize_current(x, 3, 200, DType::kE5M2, 1, 128);
  EXPECT_EQ(m.scale.size(), 6u);
  float a = 0;
  for (int c = 128; c < 200; ++c) a = std::max(a, std::fabs(x[200 + c]));
  EXPECT_EQ(m.scale[3], current_scale(a, DType::kE5M2));
}

TEST(Fp8Scaling, DelayedStateRoundTripsAndRefusesAnotherLength) {
  DelayedScaler s(DType::kE5M2, 3, 1);
  std::vector<float> x = {3.0f, -9.0f};
  s.quantize(x, 1, 2);
  s.update();
  s.quantize(x, 1, 2);  // pending amax 9, not yet in the history
  DelayedScaler r(DType::kE5M2, 3, 1);
  r.restore(s.state());
  s.update();
  r.update();
  EXPECT_EQ(r.scale(), s.scale());
  EXPECT_EQ(r.history(), s.history());
  DelayedScaler other(DType::kE5M2, 4, 1);
  EXPECT_THROW(other.restore(s.state()), InputError);
}

TEST(Fp8Scaling, BadRecipeHistoryAndMarginAreInputErrors) {
  EXPECT_EQ(parse_recipe("blockwise"), Recipe::kBlockwise);
  EXPECT_THROW(parse_recipe("rowwise"), InputError);
  EXPECT_THROW(DelayedScaler(DType::kE4M3, 0, 0), InputError);
  EXPECT_THROW(DelayedScaler(DType::kE4M3, 16, -1), InputError);
  std::vector<float> x(6, 1.0f);
  EXPECT_THROW(quantize_current(x, 2, 2, DType::kE4M3, 1, 2), InputError);
}

}  // namespace
}  // namespace mixpar::fp8
