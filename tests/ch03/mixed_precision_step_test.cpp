// mixed_precision_step, the one step sequence both engines run: MixedPrecisionOptimizer::step
// is it over the optimizer's own CPU engine, bit for bit; an engine that fuses unscale and clip
// into its update (the GPU engine's way, here on the CPU) receives the very same calls in the
// same order, for a clean step, a skipped one, no scaling, the replicas' vote and each of the
// lesson's mistakes; the scaler's 1/S and the clip coefficient reach the fused update, and it
// equals the in-place step up to the roundings of the multiplies.
#include "ch03_master_weights/mixed_precision_step.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "ops/elementwise.h"
#include "ops/reductions.h"
#include "optim/adamw.h"
#include "optim/clip.h"

namespace mixpar::ch03 {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Forwards every call to an engine and writes down which call it was (with the unscale factor,
// which both engines must receive exactly).
class RecordingEngine final : public StepEngine {
 public:
  explicit RecordingEngine(StepEngine& inner) : inner_(inner) {}
  void prepare_fp32_grads() override {
    calls.push_back("prepare_fp32_grads");
    inner_.prepare_fp32_grads();
  }
  bool unscale_and_check(float inv_scale) override {
    calls.push_back("unscale_and_check " + std::to_string(inv_scale));
    return inner_.unscale_and_check(inv_scale);
  }
  double grad_norm() override {
    calls.push_back("grad_norm");
    return inner_.grad_norm();
  }
  void clip(double coef) override {
    calls.push_back(coef == 1.0 ? "clip 1" : "clip <1");
    inner_.clip(coef);
  }
  void optimizer_step() override {
    calls.push_back("optimizer_step");
    inner_.optimizer_step();
  }
  void recast() override {
    calls.push_back("recast");
    inner_.recast();
  }
  std::vector<std::string> calls;

 private:
  StepEngine& inner_;
};

// FP32 parameters and AdamW on the CPU, fusing as cuda/gpt_gpu.h's GpuAdamWStep does: unscale
// and clip record their factors, the norm is the scaled gradients' times them, the update
// applies them as it reads the gradients, and the re-cast is part of the update.
class FusingCpuEngine final : public StepEngine {
 public:
  FusingCpuEngine(const std::vector<float>& w, const AdamWConfig& config)
      : param_(Tensor::from_floats(w, {std::int64_t(w.size())})),
        grad_(Tensor::zeros({std::int64_t(w.size())}, DType::kF32)),
        adamw_(std::vector<Tensor>{param_}, config) {}
  void set_grad(const std::vector<float>& g) {
    grad_.copy_from(Tensor::from_floats(g, {std::int64_t(g.size())}));
  }
  void prepare_fp32_grads() override {
    inv_scale_ = 1.0f;
    clip_coef_ = 1.0;
  }
  bool unscale_and_check(float inv_scale) override {
    inv_scale_ *= inv_scale;
    return !std::isfinite(ops::sum_of_squares(grad_));
  }
  double grad_norm() override {
    return std::sqrt(ops::sum_of_squares(grad_)) * static_cast<double>(inv_scale_) * clip_coef_;
  }
  void clip(double coef) override { clip_coef_ *= coef; }
  void optimizer_step() override {
    ++steps;
    seen_inv_scale = inv_scale_;
    seen_clip_coef = clip_coef_;
    if (inv_scale_ != 1.0f) ops::scale(grad_, inv_scale_);
    if (clip_coef_ != 1.0) ops::scale(grad_, clip_coef_);
    adamw_.step(std::vector<Tensor>{grad_});
  }
  void recast() override {}
  const Tensor& param() const { return param_; }

  int steps = 0;
  float seen_inv_scale = 0;
  double seen_clip_coef = 0;

 private:
  Tensor param_, grad_;
  AdamW adamw_;
  float inv_scale_ = 1.0f;
  double clip_coef_ = 1.0;
};

std::vector<unsigned char> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const unsigned char*>(t.data());
  return {p, p + t.nbytes()};
}

TEST(MixedPrecisionStep, ACleanStepGivesTheFusedUpdateTheScalersInverseAndTheClipCoefficient) {
  FusingCpuEngine engine({1.0f, 2.0f}, AdamWConfig{});
  ch02::LossScaler scaler(ch02::static_config(1024.0));
  engine.set_grad({3.0f * 1024, 4.0f * 1024});  // true gradient (3, 4): norm 5
  const StepReport r = mixed_precision_step(engine, scaler, {.max_grad_norm = 1.0});
  EXPECT_TRUE(r.taken);
  EXPECT_FALSE(r.found_inf);
  EXPECT_EQ(r.scale, 1024.0f);
  EXPECT_EQ(r.grad_norm, 5.0);
  EXPECT_EQ(r.clip_coef, clip_coefficient(5.0, 1.0));
  EXPECT_EQ(engine.steps, 1);
  EXPECT_EQ(engine.seen_inv_scale, scaler.inv_scale());
  EXPECT_EQ(engine.seen_clip_coef, r.clip_coef);
}

TEST(MixedPrecisionStep, AnInfSkipsTheUpdateAndBacksTheScaleOff) {
  FusingCpuEngine engine({1.0f, 2.0f}, AdamWConfig{});
  ch02::LossScaler scaler(ch02::pytorch_config());
  engine.set_grad({kInf, 1.0f});
  const Tensor before = engine.param().clone();
  const StepReport r = mixed_precision_step(engine, scaler, {.max_grad_norm = 1.0});
  EXPECT_TRUE(r.found_inf);
  EXPECT_FALSE(r.taken);
  EXPECT_TRUE(std::isnan(r.grad_norm)) << "a skipped step measures no norm";
  EXPECT_EQ(engine.steps, 0);
  EXPECT_EQ(scaler.scale(), 32768.0f);
  EXPECT_EQ(scaler.state().steps_skipped, 1);
  EXPECT_EQ(engine.param().to_floats(), before.to_floats());
}

// GradScaler(enabled=False): nothing checked, every step taken.
TEST(MixedPrecisionStep, WithoutScalingNothingIsCheckedAndEveryStepIsTaken) {
  FusingCpuEngine engine({1.0f}, AdamWConfig{});
  ch02::LossScaler scaler(ch02::no_scaling_config());
  engine.set_grad({std::numeric_limits<float>::quiet_NaN()});
  const StepReport r = mixed_precision_step(engine, scaler, {});
  EXPECT_FALSE(r.found_inf);
  EXPECT_TRUE(r.taken);
  EXPECT_EQ(engine.steps, 1);
  EXPECT_EQ(engine.seen_inv_scale, 1.0f);
  EXPECT_EQ(engine.seen_clip_coef, 1.0);
}

// One case of the sequence: the rules, the scaler, and the true (unscaled) gradient.
struct Case {
  const char* name;
  StepRules rules;
  ch02::LossScalerConfig scaler;
  std::vector<float> grad;
  std::vector<std::string> calls;  // what the sequence asks of any engine, in order
};

std::vector<Case> cases() {
  const std::vector<float> g = {0.3f, -0.9f, 1.7f, 0.05f};  // norm ~1.97
  const std::vector<float> inf = {0.3f, kInf, 1.7f, 0.05f};
  const std::string unscale = "unscale_and_check " + std::to_string(1.0f / 256);
  const std::string check = "unscale_and_check " + std::to_string(1.0f);
  const auto yes = [](bool) { return true; };
  return {
      {"clean, clipped",
       {.max_grad_norm = 0.5},
       ch02::static_config(256.0),
       g,
       {"prepare_fp32_grads", unscale, "grad_norm", "clip <1", "optimizer_step", "recast"}},
      {"clean, not clipped",
       {},
       ch02::static_config(256.0),
       g,
       {"prepare_fp32_grads", unscale, "grad_norm", "optimizer_step", "recast"}},
      {"inf, skipped", {.max_grad_norm = 0.5}, ch02::static_config(256.0), inf,
       {"prepare_fp32_grads", unscale}},
      {"no scaling: no check",
       {.max_grad_norm = 0.5},
       ch02::no_scaling_config(),
       g,
       {"prepare_fp32_grads", "grad_norm", "clip <1", "optimizer_step", "recast"}},
      {"another rank overflowed",
       {.max_grad_norm = 0.5, .found_inf_vote = yes},
       ch02::static_config(256.0),
       g,
       {"prepare_fp32_grads", unscale}},
      {"clip-before-unscale",
       {.max_grad_norm = 0.5, .bug = Bug::kClipBeforeUnscale},
       ch02::static_config(256.0),
       g,
       {"prepare_fp32_grads", "grad_norm", "clip <1", unscale, "optimizer_step", "recast"}},
      {"no-unscale",
       {.bug = Bug::kNoUnscale},
       ch02::static_config(256.0),
       g,
       {"prepare_fp32_grads", check, "grad_norm", "optimizer_step", "recast"}},
  };
}

std::vector<float> scaled(const std::vector<float>& g, double scale) {
  std::vector<float> out;
  for (float x : g) out.push_back(x * static_cast<float>(scale));
  return out;
}

// The sequence is chapter 3's, not an engine's: the optimizer's CPU engine (each multiply in
// place, 16-bit working copy) and a fusing engine (FP32, factors deferred) are asked the same
// things in the same order, in every case.
TEST(MixedPrecisionStep, BothEnginesReceiveTheSameCallsInTheSameOrder) {
  for (const Case& c : cases()) {
    MixedPrecisionConfig config;
    config.scaler = c.scaler;
    const std::vector<float> w = {0.5f, -1.25f, 2.0f, 0.75f};
    Tensor param = Tensor::from_floats(w, {4}, DType::kBF16);
    Tensor grad = Tensor::from_floats(scaled(c.grad, c.scaler.init_scale), {4}, DType::kBF16);
    MixedPrecisionOptimizer optimizer({param}, {grad}, config);
    RecordingEngine on_cpu(optimizer.engine());
    ch02::LossScaler& cpu_scaler = optimizer.scaler();
    const StepReport a = mixed_precision_step(on_cpu, cpu_scaler, c.rules);

    FusingCpuEngine fusing(w, config.adamw);
    fusing.set_grad(scaled(c.grad, c.scaler.init_scale));
    RecordingEngine fused(fusing);
    ch02::LossScaler fused_scaler(c.scaler);
    const StepReport b = mixed_precision_step(fused, fused_scaler, c.rules);

    EXPECT_EQ(on_cpu.calls, c.calls) << c.name;
    EXPECT_EQ(fused.calls, c.calls) << c.name;
    EXPECT_EQ(a.taken, b.taken) << c.name;
    EXPECT_EQ(a.found_inf, b.found_inf) << c.name;
    EXPECT_EQ(cpu_scaler.state(), fused_scaler.state()) << c.name;
  }
}

// MixedPrecisionOptimizer::step is mixed_precision_step over engine(): the same steps run by
// hand through a recording wrapper leave the same bits (masters, working copy, moments,
// scaler) and the same reports, over clean, clipped and skipped steps with a vote installed.
TEST(MixedPrecisionStep, IsWhatMixedPrecisionOptimizerStepRuns) {
  MixedPrecisionConfig config;
  config.adamw.lr = 1e-2;
  config.adamw.weight_decay = 0.1;
  config.max_grad_norm = 0.5;
  config.scaler = ch02::pytorch_config();
  config.scaler.growth_interval = 2;
  const std::vector<float> w = {0.5f, -1.25f, 2.0f, 0.75f};
  Tensor param_a = Tensor::from_floats(w, {4}, DType::kF16);
  Tensor grad_a = Tensor::zeros({4}, DType::kF16);
  Tensor param_b = param_a.clone(), grad_b = grad_a.clone();
  MixedPrecisionOptimizer a({param_a}, {grad_a}, config), b({param_b}, {grad_b}, config);
  // Another rank overflows at the fourth step: the fourth vote says skip.
  int votes_a = 0, votes_b = 0;
  a.set_found_inf_reducer([&votes_a](bool local) { return ++votes_a == 4 || local; });
  const auto vote_b = [&votes_b](bool local) { return ++votes_b == 4 || local; };
  int skipped = 0;
  for (int step = 0; step < 6; ++step) {
    std::vector<float> g = {0.03f * float(step + 1), -0.09f, 0.17f, 0.005f};
    if (step == 1) g[2] = kInf;
    const Tensor scaled_grad =
        Tensor::from_floats(scaled(g, a.scaler().scale()), {4}).to(DType::kF16);
    grad_a.copy_from(scaled_grad);
    grad_b.copy_from(scaled_grad);
    const StepReport want = a.step();
    RecordingEngine recording(b.engine());
    const StepReport got =
        mixed_precision_step(recording, b.scaler(),
                             {.max_grad_norm = config.max_grad_norm, .found_inf_vote = vote_b});
    skipped += !want.taken;
    EXPECT_EQ(recording.calls.front(), "prepare_fp32_grads") << "step " << step;
    EXPECT_EQ(got.taken, want.taken) << "step " << step;
    EXPECT_EQ(got.found_inf, want.found_inf) << "step " << step;
    EXPECT_EQ(got.scale, want.scale) << "step " << step;
    EXPECT_EQ(std::isnan(got.grad_norm), std::isnan(want.grad_norm)) << "step " << step;
    if (!std::isnan(want.grad_norm)) {
      EXPECT_EQ(got.grad_norm, want.grad_norm) << "step " << step;
    }
    EXPECT_EQ(got.clip_coef, want.clip_coef) << "step " << step;
    EXPECT_EQ(bytes_of(param_b), bytes_of(param_a)) << "step " << step;
    EXPECT_EQ(bytes_of(b.stepped_params()[0]), bytes_of(a.stepped_params()[0]))
        << "step " << step;
    EXPECT_EQ(bytes_of(b.adamw()->exp_avg_sq(0)), bytes_of(a.adamw()->exp_avg_sq(0)))
        << "step " << step;
    EXPECT_EQ(b.scaler().state(), a.scaler().state()) << "step " << step;
  }
  EXPECT_EQ(skipped, 2) << "the inf at step 1 and the vote at step 3";
}

// The fused order measures the norm on the scaled gradients and multiplies it by 1/S, the CPU
// optimizer unscales first and measures after: the same step up to those roundings.
TEST(MixedPrecisionStep, TheFusedUpdateEqualsMixedPrecisionOptimizerOnTheSameGradients) {
  const std::vector<float> w = {0.5f, -1.25f, 2.0f, 0.75f};
  const std::vector<float> g = {0.3f, -0.9f, 1.7f, 0.05f};
  MixedPrecisionConfig c;
  c.adamw.lr = 1e-2;
  c.adamw.weight_decay = 0.1;
  c.max_grad_norm = 0.5;
  c.scaler = ch02::static_config(256.0);
  Tensor param = Tensor::from_floats(w, {4}), grad = Tensor::zeros({4}, DType::kF32);
  MixedPrecisionOptimizer reference({param}, {grad}, c);
  FusingCpuEngine engine(w, c.adamw);
  ch02::LossScaler scaler(c.scaler);
  for (int step = 0; step < 3; ++step) {
    const std::vector<float> scaled_grad = scaled(scaled(g, 256.0), step + 1);
    grad.copy_from(Tensor::from_floats(scaled_grad, {4}));
    engine.set_grad(scaled_grad);
    const StepReport want = reference.step();
    const StepReport got = mixed_precision_step(engine, scaler, {.max_grad_norm = c.max_grad_norm});
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
