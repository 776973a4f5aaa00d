// Each row of the ch02 demo table behaves as the lesson says (the demo's own functions, the
// default configuration), and a skipped step of the lesson's loop changes nothing but the
// scaler: weights, both Adam moments and the step count stay bit-identical.
#include "ch02_loss_scaling/scaling_lesson.h"

#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

namespace mixpar::ch02 {
namespace {

const LessonConfig kLesson;  // the demo's defaults

const Scheme& scheme(const char* name) {
  static const std::vector<Scheme> all = lesson_schemes(kLesson);
  for (const Scheme& s : all) {
    if (s.name == name) return s;
  }
  throw std::out_of_range(name);
}

// The FP32 reference row, computed once for every test that compares with it.
const RowResult& fp32_row() {
  static const RowResult r = run_row(kLesson, DType::kF32, scheme("none"));
  return r;
}

TEST(ScalingLesson, SchemesAreNoneStatic1024TooLargeAndDynamic) {
  const std::vector<Scheme> s = lesson_schemes(kLesson);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[1].name, "static 1024");
  EXPECT_EQ(s[2].name, "static 2^40");
  EXPECT_EQ(s[3].scaler.init_scale, 65536.0);  // PyTorch's initial scale
}

TEST(ScalingLesson, MostTrueGradientsLieBelowFp16SmallestSubnormal) {
  const GradientCensus c = census_at_init(kLesson);
  EXPECT_GT(c.below_min_subnormal, 0.5);
  EXPECT_GT(c.max_abs * kLesson.too_large_scale, 65504.0);  // 2^40 overflows FP16's max
  EXPECT_LT(c.max_abs * kLesson.static_scale, 65504.0);     // 1024 does not
}

TEST(ScalingLesson, Fp32RowNeverUnderflowsOverflowsOrSkips) {
  const RowResult& r = fp32_row();
  EXPECT_EQ(r.underflowed, 0);
  EXPECT_EQ(r.overflow_steps, 0);
  EXPECT_EQ(r.skipped_steps, 0);
  EXPECT_LT(r.final_loss, r.initial_loss / 4);  // it learns
}

TEST(ScalingLesson, Fp16WithoutScalingLosesMostGradientsAndTrainsWorse) {
  const RowResult r = run_row(kLesson, DType::kF16, scheme("none"));
  EXPECT_GT(r.underflow_fraction(), 0.5);
  EXPECT_EQ(r.overflow_steps, 0);
  EXPECT_GT(r.final_loss, 2 * fp32_row().final_loss);
}

TEST(ScalingLesson, Fp16WithStatic1024KeepsAlmostAllGradientsAndTrainsLikeFp32) {
  const RowResult r = run_row(kLesson, DType::kF16, scheme("static 1024"));
  EXPECT_LT(r.underflow_fraction(), 0.01);
  EXPECT_GT(r.underflowed, 0);  // still a few: 1024 is a guess, not the best scale
  EXPECT_EQ(r.skipped_steps, 0);
  EXPECT_NEAR(r.final_loss, fp32_row().final_loss, 0.05 * fp32_row().final_loss);
}

TEST(ScalingLesson, TooLargeStaticScaleOverflowsAndSkipsEveryStepSoNothingMoves) {
  const RowResult r = run_row(kLesson, DType::kF16, scheme("static 2^40"));
  EXPECT_EQ(r.overflow_steps, r.steps);
  EXPECT_EQ(r.skipped_steps, r.steps);
  EXPECT_EQ(r.final_loss, r.initial_loss);  // bit-identical masters
}

TEST(ScalingLesson, DynamicScaleFindsTheOverflowEdgeAndTrainsLikeFp32) {
  const RowResult r = run_row(kLesson, DType::kF16, scheme("dynamic"));
  EXPECT_LT(r.underflow_fraction(), 1e-4);
  EXPECT_GE(r.skipped_steps, 1);             // it went past the edge...
  EXPECT_LE(r.skipped_steps * 10, r.steps);  // ...and backed off
  EXPECT_EQ(r.skipped_steps, r.overflow_steps);
  EXPECT_GT(r.max_scale_seen, 65536.0f);  // grew from 2^16
  EXPECT_NEAR(r.final_loss, fp32_row().final_loss, 0.05 * fp32_row().final_loss);
}

TEST(ScalingLesson, Bf16NeedsNoScalingAndNeverOverflows) {
  const RowResult none = run_row(kLesson, DType::kBF16, scheme("none"));
  EXPECT_LT(none.underflow_fraction(), 1e-3);
  EXPECT_NEAR(none.final_loss, fp32_row().final_loss, 0.05 * fp32_row().final_loss);
  const RowResult big = run_row(kLesson, DType::kBF16, scheme("static 2^40"));
  EXPECT_EQ(big.overflow_steps, 0);
}

std::vector<unsigned char> bytes_of(const std::vector<Tensor>& ts) {
  std::vector<unsigned char> out;
  for (const Tensor& t : ts) {
    const auto* p = static_cast<const unsigned char*>(t.data());
    out.insert(out.end(), p, p + t.nbytes());
  }
  return out;
}

std::vector<Tensor> filled(const std::vector<float>& values, DType dtype, MemCategory c) {
  return {Tensor::from_floats(values, {static_cast<std::int64_t>(values.size())}, dtype, c)};
}

}  // namespace

TEST(LossScaler, SkippedStepLeavesMomentsUntouched) {
  const std::vector<Tensor> params =
      filled({0.5f, -0.25f, 1.0f}, DType::kF16, MemCategory::kParameters);
  const std::vector<Tensor> grads = filled({0, 0, 0}, DType::kF16, MemCategory::kGradients);
  const std::vector<Tensor> grads32 = filled({0, 0, 0}, DType::kF32, MemCategory::kGradients);
  const std::vector<Tensor> masters =
      filled({0.5f, -0.25f, 1.0f}, DType::kF32, MemCategory::kMasterParams);
  AdamW opt(masters, AdamWConfig{});
  LossScaler scaler(static_config(1024));
  for (int i = 0; i < 3; ++i) {  // clean steps fill m and v with something to protect
    Tensor g = grads[0];
    g.copy_from(Tensor::from_floats(std::vector<float>{100.0f, -50.0f, 25.0f * i}, {3}));
    ASSERT_TRUE(master_weight_step(scaler, opt, grads, grads32, masters, params));
  }
  const auto weights = bytes_of(masters), working = bytes_of(params);
  const auto m = bytes_of({opt.exp_avg(0)}), v = bytes_of({opt.exp_avg_sq(0)});
  Tensor g = grads[0];
  g.copy_from(Tensor::from_floats(std::vector<float>{1.0f, INFINITY, 2.0f}, {3}));
  EXPECT_FALSE(master_weight_step(scaler, opt, grads, grads32, masters, params));
  EXPECT_EQ(bytes_of(masters), weights);
  EXPECT_EQ(bytes_of(params), working);
  EXPECT_EQ(bytes_of({opt.exp_avg(0)}), m);
  EXPECT_EQ(bytes_of({opt.exp_avg_sq(0)}), v);
  EXPECT_EQ(opt.step_count(), 3);  // t did not advance: bias correction is not disturbed
  EXPECT_EQ(scaler.state().steps_skipped, 1);
}

}  // namespace mixpar::ch02
