// fused_step, the mixed-precision step of an engine that fuses unscale and clip into its
// update (the GPU engine's), driven here over a CPU engine: the scaler's 1/S and the clip
// coefficient reach the update, an inf skips it and backs the scale off, no scaling checks
// nothing, and the step equals MixedPrecisionOptimizer's on the same gradients.
#include "ch03_master_weights/fused_step.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "ops/elementwise.h"
#include "ops/reductions.h"
#include "optim/adamw.h"
#include "optim/clip.h"

namespace mixpar::ch03 {
namespace {

// FP32 parameters and gradients on the CPU, with AdamW, recording what the step asked of it.
class CpuEngine final : public FusedStepEngine {
 public:
  CpuEngine(const std::vector<float>& w, const AdamWConfig& config)
      : param_(Tensor::from_floats(w, {std::int64_t(w.size())})),
        grad_(Tensor::zeros({std::int64_t(w.size())}, DType::kF32)),
        adamw_(std::vector<Tensor>{param_}, config) {}
  void set_grad(const std::vector<float>& g) {
    grad_.copy_from(Tensor::from_floats(g, {std::int64_t(g.size())}));
  }
  double scaled_sum_of_squares() override { return ops::sum_of_squares(grad_); }
  void step(float inv_scale, double clip_coef) override {
    ++steps;
    seen_inv_scale = inv_scale;
    seen_clip_coef = clip_coef;
    if (inv_scale != 1.0f) ops::scale(grad_, inv_scale);
    if (clip_coef != 1.0) ops::scale(grad_, clip_coef);
    adamw_.step(std::vector<Tensor>{grad_});
  }
  const Tensor& param() const { return param_; }

  int steps = 0;
  float seen_inv_scale = 0;
  double seen_clip_coef = 0;

 private:
  Tensor param_, grad_;
  AdamW adamw_;
};

TEST(FusedStep, ACleanStepGetsTheScalersInverseAndTheClipCoefficient) {
  CpuEngine engine({1.0f, 2.0f}, AdamWConfig{});
  ch02::LossScaler scaler(ch02::static_config(1024.0));
  engine.set_grad({3.0f * 1024, 4.0f * 1024});  // true gradient (3, 4): norm 5
  const StepReport r = fused_step(engine, scaler, /*max_grad_norm=*/1.0);
  EXPECT_TRUE(r.taken);
  EXPECT_FALSE(r.found_inf);
  EXPECT_EQ(r.scale, 1024.0f);
  EXPECT_EQ(r.grad_norm, 5.0);
  EXPECT_EQ(r.clip_coef, clip_coefficient(5.0, 1.0));
  EXPECT_EQ(engine.steps, 1);
  EXPECT_EQ(engine.seen_inv_scale, scaler.inv_scale());
  EXPECT_EQ(engine.seen_clip_coef, r.clip_coef);
}

TEST(FusedStep, AnInfSkipsTheUpdateAndBacksTheScaleOff) {
  CpuEngine engine({1.0f, 2.0f}, AdamWConfig{});
  ch02::LossScaler scaler(ch02::pytorch_config());
  engine.set_grad({std::numeric_limits<float>::infinity(), 1.0f});
  const Tensor before = engine.param().clone();
  const StepReport r = fused_step(engine, scaler, 1.0);
  EXPECT_TRUE(r.found_inf);
  EXPECT_FALSE(r.taken);
  EXPECT_TRUE(std::isnan(r.grad_norm)) << "a skipped step measures no norm";
  EXPECT_EQ(engine.steps, 0);
  EXPECT_EQ(scaler.scale(), 32768.0f);
  EXPECT_EQ(scaler.state().steps_skipped, 1);
  EXPECT_EQ(engine.param().to_floats(), before.to_floats());
}

// GradScaler(enabled=False), as MixedPrecisionOptimizer: nothing checked, every step taken.
TEST(FusedStep, WithoutScalingNothingIsCheckedAndEveryStepIsTaken) {
  CpuEngine engine({1.0f}, AdamWConfig{});
  ch02::LossScaler scaler(ch02::no_scaling_config());
  engine.set_grad({std::numeric_limits<float>::quiet_NaN()});
  const StepReport r = fused_step(engine, scaler, 0.0);
  EXPECT_FALSE(r.found_inf);
  EXPECT_TRUE(r.taken);
  EXPECT_EQ(engine.steps, 1);
  EXPECT_EQ(engine.seen_inv_scale, 1.0f);
  EXPECT_EQ(engine.seen_clip_coef, 1.0);
}

// The fused order measures the norm on the scaled gradients and multiplies it by 1/S, the
// CPU optimizer unscales first and measures after: the same step up to those roundings.
TEST(FusedStep, EqualsMixedPrecisionOptimizerOnTheSameGradients) {
  const std::vector<float> w = {0.5f, -1.25f, 2.0f, 0.75f};
  const std::vector<float> g = {0.3f, -0.9f, 1.7f, 0.05f};
  MixedPrecisionConfig c;
  c.adamw.lr = 1e-2;
  c.adamw.weight_decay = 0.1;
  c.max_grad_norm = 0.5;
  c.scaler = ch02::static_config(256.0);
  Tensor param = Tensor::from_floats(w, {4}), grad = Tensor::zeros({4}, DType::kF32);
  MixedPrecisionOptimizer reference({param}, {grad}, c);
  CpuEngine engine(w, c.adamw);
  ch02::LossScaler scaler(c.scaler);
  for (int step = 0; step < 3; ++step) {
    std::vector<float> scaled;
    for (float x : g) scaled.push_back(x * 256.0f * float(step + 1));
    grad.copy_from(Tensor::from_floats(scaled, {4}));
    engine.set_grad(scaled);
    const StepReport want = reference.step();
    const StepReport got = fused_step(engine, scaler, c.max_grad_norm);
    ASSERT_TRUE(want.taken && got.taken);
    EXPECT_NEAR(got.grad_norm, want.grad_norm, 1e-12 * want.grad_norm) << "step " << step;
    EXPECT_NEAR(got.clip_coef, want.clip_coef, 1e-12) << "step " << step;
    const std::vector<float> a = engine.param().to_floats(), b = param.to_floats();
    for (std::size_t i = 0; i < a.size(); ++i) {
      EXPECT_NEAR(a[i], b[i], 1e-6f * std::fabs(b[i])) << "step " << step << " element " << i;
    }
  }
}

}  // namespace
}  // namespace mixpar::ch03
