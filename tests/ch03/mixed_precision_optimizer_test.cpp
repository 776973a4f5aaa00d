// MixedPrecisionOptimizer: the correct order and each mistake's symptom, on hand-made
// gradients (exact numbers) and on the lesson's MLP runs; skipped steps change nothing;
// the ledger's bytes equal the calculator's prediction plus the stated FP32 gradient buffer.
#include "ch03_master_weights/mixed_precision_optimizer.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "ch03_master_weights/memory_bill.h"
#include "ch03_master_weights/order_lesson.h"
#include "optim/clip.h"
#include "util/errors.h"

namespace mixpar::ch03 {
namespace {

Tensor vec(const std::vector<float>& v, DType dtype, MemCategory c) {
  return Tensor::from_floats(v, {static_cast<std::int64_t>(v.size())}, dtype, c);
}

// One working-copy parameter and its gradient, as a model would hand them over.
struct Toy {
  Tensor param, grad;
  Toy(const std::vector<float>& w, DType dtype)
      : param(vec(w, dtype, MemCategory::kParameters)),
        grad(vec(std::vector<float>(w.size(), 0.0f), dtype, MemCategory::kGradients)) {}
  void set_grad(const std::vector<float>& g) {
    grad.copy_from(vec(g, DType::kF32, MemCategory::kOther));
  }
  MixedPrecisionOptimizer optimizer(const MixedPrecisionConfig& c) const {
    return {{param}, {grad}, c};
  }
};

MixedPrecisionConfig sgd_config(double lr, Bug bug = Bug::kNone) {
  MixedPrecisionConfig c;
  c.optimizer = OptimizerKind::kSgd;
  c.sgd.lr = lr;
  c.scaler = ch02::no_scaling_config();
  c.bug = bug;
  return c;
}

std::vector<unsigned char> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const unsigned char*>(t.data());
  return {p, p + t.nbytes()};
}

TEST(MixedPrecisionOptimizer, FoundInfReducerOverridesTheLocalCheck) {
  // Data parallelism's vote: clean local gradients, yet another rank overflowed. The step is
  // skipped (the scale backs off, nothing moves); and a clean vote lets a clean step through.
  Toy toy({1.0f, 2.0f}, DType::kF16);
  MixedPrecisionConfig c;
  c.optimizer = OptimizerKind::kAdamW;
  c.adamw.lr = 0.1;
  MixedPrecisionOptimizer opt = toy.optimizer(c);
  std::vector<bool> votes;
  opt.set_found_inf_reducer([&votes](bool local) {
    votes.push_back(local);
    return true;  // some other rank found inf
  });
  toy.set_grad({0.5f * opt.loss_scale(), 0.25f * opt.loss_scale()});
  const float scale = opt.loss_scale();
  const std::vector<unsigned char> before = bytes_of(opt.stepped_params()[0]);
  const StepReport skipped = opt.step();
  EXPECT_FALSE(skipped.taken);
  EXPECT_TRUE(skipped.found_inf);
  EXPECT_EQ(votes, std::vector<bool>{false});  // this rank's own check was clean
  EXPECT_EQ(bytes_of(opt.stepped_params()[0]), before);
  EXPECT_EQ(opt.step_count(), 0);
  EXPECT_EQ(opt.loss_scale(), scale * 0.5f);
  opt.set_found_inf_reducer([](bool local) { return local; });
  toy.set_grad({0.5f * opt.loss_scale(), 0.25f * opt.loss_scale()});
  EXPECT_TRUE(opt.step().taken);
  EXPECT_EQ(opt.step_count(), 1);
}

TEST(MixedPrecisionOptimizer, SetLrChangesTheNextStep) {
  // SGD without momentum: w <- w - lr g, so the step is exactly the learning rate given.
  Toy toy({1.0f}, DType::kF32);
  MixedPrecisionOptimizer opt = toy.optimizer(sgd_config(0.5));
  toy.set_grad({1.0f});
  opt.set_lr(0.25);
  ASSERT_TRUE(opt.step().taken);
  EXPECT_EQ(opt.stepped_params()[0].to_floats()[0], 0.75f);
}

TEST(MixedPrecisionOptimizer, Fp16WeightsSwallowSmallUpdatesThatFp32MastersKeep) {
  // lr x g = 1e-4 x ~1e-3 = ~1e-7, far below half an FP16 ulp at 0.5 (2^-12): 0.5 + 1e-7 == 0.5.
  Toy pure({0.5f, 0.5f}, DType::kF16), mixed({0.5f, 0.5f}, DType::kF16);
  pure.set_grad({1e-3f, -1e-3f});
  mixed.set_grad({1e-3f, -1e-3f});
  MixedPrecisionOptimizer no_masters = pure.optimizer(sgd_config(1e-4, Bug::kFp16Weights));
  MixedPrecisionOptimizer masters = mixed.optimizer(sgd_config(1e-4));
  ASSERT_FALSE(no_masters.has_masters());
  ASSERT_TRUE(masters.has_masters());
  no_masters.step();
  masters.step();
  EXPECT_EQ(pure.param.to_floats(), (std::vector<float>{0.5f, 0.5f}));  // change exactly 0
  const std::vector<float> m1 = masters.stepped_params()[0].to_floats();
  EXPECT_LT(m1[0], 0.5f);  // the master moved by ~1e-7
  EXPECT_GT(m1[1], 0.5f);
  // 3000 x 1e-7 = 3e-4: more than half an FP16 ulp on either side of 0.5.
  for (int i = 1; i < 3000; ++i) {
    no_masters.step();
    masters.step();
  }
  EXPECT_EQ(pure.param.to_floats(), (std::vector<float>{0.5f, 0.5f}));  // still exactly 0.5
  const std::vector<float> w = mixed.param.to_floats();
  EXPECT_LT(w[0], 0.5f);  // the working copy moved: the masters accumulated the updates
  EXPECT_GT(w[1], 0.5f);
  const std::vector<float> m = masters.stepped_params()[0].to_floats();
  EXPECT_EQ(w[0], round_to(DType::kF16, m[0]));  // and it is the masters, re-cast
}

MixedPrecisionConfig clip_config(Bug bug) {
  MixedPrecisionConfig c = sgd_config(0.0, bug);
  c.scaler = ch02::static_config(1024);
  c.max_grad_norm = 1.0;
  return c;
}

TEST(MixedPrecisionOptimizer,
     ClipBeforeUnscaleMeasuresScaleTimesTheNormAndClipsToMaxNormOverScale) {
  // True gradients (0.375, 0.5), norm 0.625 < max_norm 1: the correct order does not clip.
  // Backward with scale 1024 left (384, 512) in FP16, exactly.
  Toy ok({0, 0}, DType::kF16), bad({0, 0}, DType::kF16);
  ok.set_grad({384, 512});
  bad.set_grad({384, 512});
  MixedPrecisionOptimizer correct = ok.optimizer(clip_config(Bug::kNone));
  MixedPrecisionOptimizer buggy = bad.optimizer(clip_config(Bug::kClipBeforeUnscale));
  const StepReport rc = correct.step(), rb = buggy.step();
  EXPECT_EQ(rc.grad_norm, 0.625);
  EXPECT_EQ(rc.clip_coef, 1.0);
  EXPECT_EQ(correct.fp32_grads()[0].to_floats(), (std::vector<float>{0.375f, 0.5f}));
  EXPECT_EQ(rb.grad_norm, 640.0);  // 1024 x 0.625: the threshold is compared with this
  EXPECT_LT(rb.clip_coef, 1.0);
  // After clipping to max_norm and unscaling, the gradient's norm is max_norm / 1024.
  EXPECT_NEAR(global_grad_norm(buggy.fp32_grads()), 1.0 / 1024, 1e-9);
}

TEST(MixedPrecisionOptimizer, ClipBeforeUnscaleClipsEveryTrueNormAboveMaxNormOverScale) {
  // True norm 5/512 ~ 0.0098: 100x below max_norm, but above max_norm / 1024.
  Toy ok({0, 0}, DType::kF16), bad({0, 0}, DType::kF16);
  ok.set_grad({6, 8});  // (3/512, 4/512) x 1024
  bad.set_grad({6, 8});
  MixedPrecisionOptimizer correct = ok.optimizer(clip_config(Bug::kNone));
  MixedPrecisionOptimizer buggy = bad.optimizer(clip_config(Bug::kClipBeforeUnscale));
  EXPECT_EQ(correct.step().clip_coef, 1.0);
  EXPECT_LT(buggy.step().clip_coef, 0.11);  // clipped to 1/10 of its size
}

TEST(MixedPrecisionOptimizer, NoUnscaleMultipliesTheSgdStepByExactlyTheScale) {
  Toy ok({1, 1}, DType::kF16), bad({1, 1}, DType::kF16);
  ok.set_grad({1, 2});  // true gradients (1, 2) / 1024 under scale 1024
  bad.set_grad({1, 2});
  MixedPrecisionConfig c = sgd_config(1.0 / 16);
  c.scaler = ch02::static_config(1024);
  MixedPrecisionOptimizer correct = ok.optimizer(c);
  c.bug = Bug::kNoUnscale;
  MixedPrecisionOptimizer buggy = bad.optimizer(c);
  correct.step();
  buggy.step();
  const std::vector<float> mc = correct.stepped_params()[0].to_floats();
  const std::vector<float> mb = buggy.stepped_params()[0].to_floats();
  for (int i = 0; i < 2; ++i) EXPECT_EQ(1.0f - mb[i], 1024.0f * (1.0f - mc[i]));
}

LessonConfig short_lesson(std::int64_t steps) {
  LessonConfig c;
  c.steps = steps;
  return c;
}

// The lesson's "forgot to unscale" scenario with AdamW (the SGD one diverges instead).
RunSpec adamw_no_unscale_run() {
  for (const Scenario& s : lesson_scenarios(LessonConfig{})) {
    if (s.buggy.opt.bug == Bug::kNoUnscale && s.buggy.opt.optimizer == OptimizerKind::kAdamW) {
      return s.buggy;
    }
  }
  throw std::logic_error("no AdamW no-unscale scenario");
}

TEST(MixedPrecisionOptimizer, NoUnscaleWithAdamWEqualsTheCorrectStepWithEpsDividedByTheScale) {
  // Adam is invariant to a power-of-two factor on g except through eps: a missing unscale
  // is exactly eps / scale, bit for bit (why "forgot to unscale" often goes unnoticed).
  const RunSpec buggy = adamw_no_unscale_run();
  RunSpec correct = buggy;
  correct.opt.bug = Bug::kNone;
  correct.opt.adamw.eps /= buggy.opt.scaler.init_scale;
  const LessonConfig c = short_lesson(20);
  const RunResult a = train(c, correct), b = train(c, buggy);
  EXPECT_EQ(a.final_weights, b.final_weights);
  EXPECT_LT(a.final_loss, a.initial_loss);
}

TEST(MixedPrecisionOptimizer, ForgettingToUnscaleDivergesWhereTheCorrectOrderConverges) {
  const std::vector<Scenario> all = lesson_scenarios(LessonConfig{});
  const Scenario& s = scenario_for(all, Bug::kNoUnscale);  // SGD: the AdamW one comes later
  ASSERT_EQ(s.buggy.opt.optimizer, OptimizerKind::kSgd);
  const ScenarioResult r = run_scenario(LessonConfig{}, s);
  EXPECT_LT(r.correct.final_loss, r.correct.initial_loss / 2);
  EXPECT_TRUE(!std::isfinite(r.buggy.final_loss) || r.buggy.final_loss > 100 * r.buggy.initial_loss)
      << r.buggy.final_loss;
  // One 1024x step, then every backward overflows FP16 and the scaler skips every step.
  EXPECT_EQ(r.buggy.steps_taken, 1);
}

void expect_skip_changes_nothing(OptimizerKind kind) {
  Toy t({0.5f, -0.25f, 2.0f}, DType::kF16);
  MixedPrecisionConfig c;
  c.optimizer = kind;
  c.sgd.momentum = 0.9;
  c.max_grad_norm = 1.0;  // PyTorch defaults otherwise: dynamic scaler at 2^16
  MixedPrecisionOptimizer opt = t.optimizer(c);
  for (int i = 0; i < 3; ++i) {
    t.set_grad({1000.0f, -500.0f, 100.0f * i});
    ASSERT_TRUE(opt.step().taken);
  }
  const Tensor& state0 =
      kind == OptimizerKind::kAdamW ? opt.adamw()->exp_avg(0) : opt.sgd()->momentum_buffer(0);
  const auto master = bytes_of(opt.stepped_params()[0]), working = bytes_of(t.param);
  const auto state = bytes_of(state0);
  const auto v = kind == OptimizerKind::kAdamW ? bytes_of(opt.adamw()->exp_avg_sq(0)) : state;
  t.set_grad({1.0f, INFINITY, 2.0f});
  const StepReport r = opt.step();
  EXPECT_FALSE(r.taken);
  EXPECT_TRUE(r.found_inf);
  EXPECT_EQ(bytes_of(opt.stepped_params()[0]), master);
  EXPECT_EQ(bytes_of(t.param), working);
  EXPECT_EQ(bytes_of(state0), state);
  if (kind == OptimizerKind::kAdamW) {
    EXPECT_EQ(bytes_of(opt.adamw()->exp_avg_sq(0)), v);
  }
  EXPECT_EQ(opt.step_count(), 3);
  EXPECT_EQ(opt.loss_scale(), 32768.0f);  // the scaler is the only thing that moved
}

TEST(MixedPrecisionOptimizer, SkippedStepLeavesMastersMomentsStepCountAndWorkingCopyUntouched) {
  expect_skip_changes_nothing(OptimizerKind::kAdamW);
  expect_skip_changes_nothing(OptimizerKind::kSgd);
}

// ||a - b|| / ||b|| over the flattened weights.
double relative_distance(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    d += (double(a[i]) - b[i]) * (double(a[i]) - b[i]);
    n += double(b[i]) * b[i];
  }
  return std::sqrt(d / n);
}

TEST(MixedPrecisionOptimizer, CorrectOrderTracksFp32TrainingOver100Steps) {
  // Measured: loss within 1e-6 (fp16) and 7e-5 (bf16) relative, masters within 0.03% and
  // 0.2% of the FP32 weights. Asserted with margin: 0.1% on the loss, 1% on the weights.
  const LessonConfig c = short_lesson(100);
  MixedPrecisionConfig adam;
  adam.adamw.lr = 1e-3;
  adam.max_grad_norm = 1.0;
  adam.scaler = ch02::no_scaling_config();
  const RunResult fp32 = train(c, {"fp32", DType::kF32, adam});
  const RunResult bf16 = train(c, {"bf16", DType::kBF16, adam});
  adam.scaler = ch02::pytorch_config();
  const RunResult fp16 = train(c, {"fp16", DType::kF16, adam});
  EXPECT_LT(fp32.final_loss, fp32.initial_loss / 2);
  for (const RunResult* r : {&fp16, &bf16}) {
    SCOPED_TRACE(r->name);
    EXPECT_NEAR(r->final_loss, fp32.final_loss, 1e-3 * fp32.final_loss);
    EXPECT_LT(relative_distance(r->final_weights, fp32.final_weights), 0.01);
  }
}

TEST(MixedPrecisionOptimizer, LedgerBytesEqualTheCalculatorPlusTheFp32GradientBuffer) {
  for (mem::Optimizer o : {mem::Optimizer::kAdamW, mem::Optimizer::kSgdMomentum}) {
    for (mem::Precision p : {mem::Precision::kFp32, mem::Precision::kFp16, mem::Precision::kBf16}) {
      SCOPED_TRACE(std::string(mem::name(p)) + " " + std::string(mem::name(o)));
      const MemoryBillRow r = measure_memory_bill(LessonConfig{}, p, o);
      const mem::ModelStates want = mem::model_states(r.params, p, o);
      EXPECT_EQ(r.params, 6922);
      EXPECT_EQ(r.measured.parameters, want.parameters);
      EXPECT_EQ(r.measured.master_params, want.master_params);
      EXPECT_EQ(r.measured.optimizer_state, want.optimizer_state);
      // The calculator bills 16-bit gradients only; the FP32 copy the unscale writes into is
      // this implementation's extra 4 bytes per parameter (Megatron's main_grad).
      const std::int64_t fp32_copy = p == mem::Precision::kFp32 ? 0 : 4 * r.params;
      EXPECT_EQ(r.measured.gradients, want.gradients + fp32_copy);
      EXPECT_EQ(r.measured.activations, r.predicted_activations);
    }
  }
}

// offload: the masters, the FP32 gradient copy and the moments billed to the ledger's host
// side (the working copy and its gradients stay the device's), and the same steps bit for bit:
// AdamW, clipped, in bf16 and fp32 (whose parameters are the masters and stay on the device).
TEST(MixedPrecisionOptimizer, OffloadBillsTheStateToTheHostAndStepsTheSameBits) {
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    SCOPED_TRACE(std::string(dtype_name(dtype)));
    std::vector<std::vector<unsigned char>> params;
    for (bool offload : {false, true}) {
      MemoryLedger ledger;
      LedgerScope scope(ledger);
      Toy t({0.5f, -1.25f, 2.0f, 3.0f}, dtype);
      MixedPrecisionConfig c;
      c.adamw.lr = 0.1;
      c.max_grad_norm = 0.3;
      c.scaler = ch02::no_scaling_config();
      c.offload = offload;
      MixedPrecisionOptimizer opt = t.optimizer(c);
      for (int s = 0; s < 3; ++s) {
        t.set_grad({0.25f * float(s + 1), -0.5f, 1.0f, 0.125f});
        ASSERT_TRUE(opt.step().taken);
      }
      params.push_back(bytes_of(t.param));
      const std::size_t n = 4, master = dtype == DType::kF32 ? 0 : 4 * n;
      const std::size_t moments = 8 * n, copy = dtype == DType::kF32 ? 0 : 4 * n;
      const std::size_t w = n * dtype_size(dtype);
      EXPECT_EQ(ledger.live(MemCategory::kParameters), w);
      EXPECT_EQ(ledger.live(MemCategory::kGradients), w + (offload ? 0 : copy));
      EXPECT_EQ(ledger.live(MemCategory::kMasterParams), offload ? 0 : master);
      EXPECT_EQ(ledger.live(MemCategory::kOptimizerState), offload ? 0 : moments);
      EXPECT_EQ(ledger.host_live(MemCategory::kMasterParams), offload ? master : 0);
      EXPECT_EQ(ledger.host_live(MemCategory::kOptimizerState), offload ? moments : 0);
      EXPECT_EQ(ledger.host_live(MemCategory::kGradients), offload ? copy : 0);
      EXPECT_EQ(opt.adamw()->exp_avg(0).place(), offload ? MemPlace::kHost : MemPlace::kDevice);
    }
    EXPECT_EQ(params[0], params[1]);
  }
}

TEST(MixedPrecisionOptimizer, Fp32ParamsAreTheirOwnMasters) {
  Toy t({1, 2}, DType::kF32);
  const MixedPrecisionOptimizer opt = t.optimizer(sgd_config(0.1));
  EXPECT_FALSE(opt.has_masters());
  EXPECT_EQ(opt.stepped_params()[0].data(), t.param.data());
  EXPECT_EQ(opt.fp32_grads()[0].data(), t.grad.data());
}

// Beside a 16-bit working copy an FP32 parameter (chapter 9's router and experts) is its own
// master and its gradient its own FP32 copy: nothing allocated for it, and the step updates it
// in place with the 16-bit one's unscale (1/S applied to both).
TEST(MixedPrecisionOptimizer, AnFp32ParamBesideSixteenBitOnesIsItsOwnMaster) {
  Toy half({1, 2}, DType::kF16), full({3, 4}, DType::kF32);
  MixedPrecisionConfig c = sgd_config(0.5);
  c.scaler = ch02::static_config(4.0);
  MemoryLedger ledger;
  const LedgerScope scope(ledger);
  MixedPrecisionOptimizer opt({half.param, full.param}, {half.grad, full.grad}, c);
  EXPECT_TRUE(opt.has_masters());
  EXPECT_EQ(opt.stepped_params()[1].data(), full.param.data());
  EXPECT_EQ(opt.fp32_grads()[1].data(), full.grad.data());
  // One FP32 master and one FP32 gradient copy: the 16-bit parameter's two elements each.
  EXPECT_EQ(ledger.live(MemCategory::kMasterParams), 2 * sizeof(float));
  EXPECT_EQ(ledger.live(MemCategory::kGradients), 2 * sizeof(float));
  half.set_grad({4, 8});  // 1 and 2, scaled by S = 4
  full.set_grad({8, 4});  // 2 and 1
  ASSERT_TRUE(opt.step().taken);
  EXPECT_EQ(half.param.to_floats(), (std::vector<float>{0.5f, 1.0f}));
  EXPECT_EQ(full.param.to_floats(), (std::vector<float>{2.0f, 3.5f}));
  Toy bf({1}, DType::kBF16);  // two 16-bit dtypes are refused still
  EXPECT_THROW(MixedPrecisionOptimizer({half.param, bf.param}, {half.grad, bf.grad}, c),
               InputError);
}

TEST(MixedPrecisionOptimizer, BadConfigurationsAreInputErrors) {
  Toy t({1, 2}, DType::kF32);
  EXPECT_THROW(t.optimizer(sgd_config(0.1, Bug::kFp16Weights)), InputError);
  Toy h({1, 2}, DType::kF16);
  EXPECT_THROW(MixedPrecisionOptimizer({h.param}, {}, sgd_config(0.1)), InputError);
  EXPECT_EQ(parse_bug("clip-before-unscale"), Bug::kClipBeforeUnscale);
  EXPECT_EQ(bug_name(parse_bug("fp16-weights")), "fp16-weights");
  EXPECT_THROW(parse_bug("clip-after-step"), InputError);
}

TEST(Ch03Demo, BadFlagPrintsOneLineAndExitsWithCode2) {
#ifdef MIXPAR_CH03_DEMO_PATH
  for (const char* flags :
       {"--bug nope", "--steps -3", "--steps many", "--frobnicate", "--fp8 --bug no-unscale"}) {
    const std::string cmd = std::string("'") + MIXPAR_CH03_DEMO_PATH + "' " + flags + " 2>&1";
    FILE* pipe = popen(cmd.c_str(), "r");
    ASSERT_NE(pipe, nullptr);
    std::string out;
    char buf[1024];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
    const int status = pclose(pipe);
    EXPECT_EQ(WIFEXITED(status) ? WEXITSTATUS(status) : -1, 2) << flags;
    EXPECT_EQ(out.find('\n'), out.size() - 1) << flags << ": " << out;  // exactly one line
    EXPECT_NE(out.find("error"), std::string::npos) << out;
  }
#else
  GTEST_SKIP() << "MIXPAR_CH03_DEMO_PATH not set by CMake";
#endif
}

}  // namespace
}  // namespace mixpar::ch03
