// AdamW and SGD against trajectories computed here in double from the formulas of
// docs/REFERENCE.md (independent code), plus closed-form facts of PyTorch's AdamW (the first step
// moves every weight by lr * sign(g)); clip_grad_norm_ semantics.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/reductions.h"
#include "optim/adamw.h"
#include "optim/clip.h"
#include "optim/sgd.h"

namespace mixpar {
namespace {

const std::vector<float> kTheta0{0.5f, -1.0f, 2.0f, 0.0f, 1e-3f};
// Gradients of three steps; element 3 sees a zero gradient on step 1.
const std::vector<std::vector<float>> kGrads{{0.1f, -0.2f, 0.3f, 0.0f, 5.0f},
                                             {-0.05f, 0.4f, 0.1f, 1.0f, -5.0f},
                                             {0.2f, 0.2f, -0.3f, -1.0f, 1e-4f}};

Tensor vec(const std::vector<float>& v) { return Tensor::from_floats(v, {static_cast<std::int64_t>(v.size())}); }

// docs/REFERENCE.md "Clipping and AdamW", in double, written without looking at the
// implementation.
std::vector<double> adamw_reference(const AdamWConfig& c, int steps, std::vector<double>* m_out,
                                    std::vector<double>* v_out) {
  std::vector<double> th(kTheta0.begin(), kTheta0.end()), m(th.size(), 0), v(th.size(), 0);
  for (int t = 1; t <= steps; ++t) {
    for (std::size_t i = 0; i < th.size(); ++i) {
      const double g = kGrads[t - 1][i];
      th[i] *= 1 - c.lr * c.weight_decay;
      m[i] = c.beta1 * m[i] + (1 - c.beta1) * g;
      v[i] = c.beta2 * v[i] + (1 - c.beta2) * g * g;
      const double denom = std::sqrt(v[i]) / std::sqrt(1 - std::pow(c.beta2, t)) + c.eps;
      th[i] -= c.lr / (1 - std::pow(c.beta1, t)) * m[i] / denom;
    }
  }
  if (m_out) *m_out = m;
  if (v_out) *v_out = v;
  return th;
}

void expect_close(const std::vector<float>& got, const std::vector<double>& want, double rel,
                  const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], want[i], rel * std::max(1e-3, std::fabs(want[i]))) << what << "[" << i << "]";
  }
}

void run_adamw_trajectory(const AdamWConfig& c) {
  Tensor theta = vec(kTheta0);
  AdamW opt({theta}, c);
  for (int t = 1; t <= 3; ++t) {
    opt.step(std::vector<Tensor>{vec(kGrads[t - 1])});
    std::vector<double> m, v;
    const auto want = adamw_reference(c, t, &m, &v);
    EXPECT_EQ(opt.step_count(), t);
    expect_close(theta.to_floats(), want, 2e-6, "theta");
    expect_close(opt.exp_avg(0).to_floats(), m, 2e-6, "m");
    expect_close(opt.exp_avg_sq(0).to_floats(), v, 2e-6, "v");
  }
}

TEST(AdamW, DefaultsMatchAHandComputedThreeStepTrajectory) { run_adamw_trajectory(AdamWConfig{}); }

TEST(AdamW, LargeLrAndDecayMatchAHandComputedThreeStepTrajectory) {
  run_adamw_trajectory(AdamWConfig{.lr = 0.1, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-6, .weight_decay = 0.1});
}

TEST(AdamW, FirstStepMovesEachWeightByLrTimesSignOfGradient) {
  // With m_hat = g and v_hat = g^2 at t = 1, PyTorch's update is lr * g / (|g| + eps):
  // theta1 = theta0 (1 - lr wd) - lr sign(g), up to eps; a zero gradient only decays.
  const AdamWConfig c{.lr = 0.01, .weight_decay = 0.5};
  Tensor theta = vec(kTheta0);
  AdamW opt({theta}, c);
  opt.step(std::vector<Tensor>{vec(kGrads[0])});
  const auto got = theta.to_floats();
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = kGrads[0][i];
    const double want = kTheta0[i] * (1 - 0.01 * 0.5) - 0.01 * g / (std::fabs(g) + 1e-8);
    EXPECT_NEAR(got[i], want, 1e-6) << i;
  }
}

TEST(AdamW, StepCountAdvancesOnlyWhenAStepIsTaken) {
  Tensor theta = vec(kTheta0);
  AdamW opt({theta});
  EXPECT_EQ(opt.step_count(), 0);
  opt.step(std::vector<Tensor>{vec(kGrads[0])});
  const auto theta1 = theta.to_floats(), m1 = opt.exp_avg(0).to_floats(), v1 = opt.exp_avg_sq(0).to_floats();
  // A skipped step is a step() not called: nothing moves, t stays 1.
  EXPECT_EQ(opt.step_count(), 1);
  EXPECT_EQ(theta.to_floats(), theta1);
  EXPECT_EQ(opt.exp_avg(0).to_floats(), m1);
  EXPECT_EQ(opt.exp_avg_sq(0).to_floats(), v1);
  // The next real step uses t = 2 in the bias corrections: the reference's step 2.
  opt.step(std::vector<Tensor>{vec(kGrads[1])});
  EXPECT_EQ(opt.step_count(), 2);
  expect_close(theta.to_floats(), adamw_reference(AdamWConfig{}, 2, nullptr, nullptr), 2e-6, "theta");
}

TEST(AdamW, MomentsAreFp32OptimizerStateOnTheLedger) {
  MemoryLedger ledger;
  LedgerScope scope(ledger);
  Tensor a = Tensor::zeros({10, 3}, DType::kF32, MemCategory::kMasterParams);
  Tensor b = Tensor::zeros({7}, DType::kF32, MemCategory::kMasterParams);
  AdamW opt({a, b});
  EXPECT_EQ(ledger.live(MemCategory::kOptimizerState), (30 + 7) * 8u);  // m and v: 8 B/param
  EXPECT_EQ(opt.exp_avg(1).dtype(), DType::kF32);
}

TEST(AdamW, Bf16ParametersSwallowSmallUpdatesThatFp32Keeps) {
  // lr 1e-4 moves 1.0 by ~1e-4 per step; bf16's spacing at 1.0 is 2^-7: every update is lost.
  Tensor w32 = vec({1.0f, 1.0f}), w16 = vec({1.0f, 1.0f}).to(DType::kBF16);
  AdamW opt32({w32}, {.lr = 1e-4, .weight_decay = 0}), opt16({w16}, {.lr = 1e-4, .weight_decay = 0});
  for (int s = 0; s < 10; ++s) {
    opt32.step(std::vector<Tensor>{vec({1.0f, -1.0f})});
    opt16.step(std::vector<Tensor>{vec({1.0f, -1.0f})});
  }
  EXPECT_EQ(w16.to_floats(), (std::vector<float>{1.0f, 1.0f}));
  EXPECT_NEAR(w32.to_floats()[0], 1.0f - 1e-3f, 1e-6);
  EXPECT_NEAR(w32.to_floats()[1], 1.0f + 1e-3f, 1e-6);
}

TEST(AdamW, ParametersOutsideTheDecayMaskSeeOnlyTheAdamUpdate) {
  // The same update with and without the mask: a decayed parameter equals an AdamW with this
  // weight decay bit for bit, an undecayed one equals an AdamW with weight_decay 0.
  AdamWConfig decayed{.lr = 0.1, .weight_decay = 0.5};
  AdamWConfig plain = decayed;
  plain.weight_decay = 0.0;
  const std::vector<float> w = {1.0f, -2.0f, 0.5f}, g = {0.3f, -0.1f, 0.2f};
  Tensor a = vec(w), b = vec(w), ref_decayed = vec(w), ref_plain = vec(w);
  AdamW masked({a, b}, decayed, {true, false});
  AdamW with_decay({ref_decayed}, decayed);
  AdamW without_decay({ref_plain}, plain);
  const Tensor grads[] = {vec(g), vec(g)};
  for (int step = 0; step < 3; ++step) {
    masked.step(grads);
    with_decay.step(std::span(grads, 1));
    without_decay.step(std::span(grads, 1));
  }
  EXPECT_EQ(a.to_floats(), ref_decayed.to_floats());
  EXPECT_EQ(b.to_floats(), ref_plain.to_floats());
  EXPECT_NE(a.to_floats(), b.to_floats());
  EXPECT_TRUE(masked.decays(0));
  EXPECT_FALSE(masked.decays(1));
  EXPECT_THROW(AdamW({vec(w)}, decayed, {true, false}), std::invalid_argument);
}

TEST(AdamW, MismatchedGradientsAreRejected) {
  Tensor theta = vec(kTheta0);
  AdamW opt({theta});
  EXPECT_THROW(opt.step(std::vector<Tensor>{}), std::invalid_argument);
  EXPECT_THROW(opt.step(std::vector<Tensor>{vec({1.0f})}), std::invalid_argument);
  EXPECT_EQ(opt.step_count(), 0) << "a rejected step must not advance t";
}

// torch.optim.SGD, dampening 0, nesterov off, in double.
std::vector<double> sgd_reference(const SgdConfig& c, int steps) {
  std::vector<double> th(kTheta0.begin(), kTheta0.end()), buf(th.size(), 0);
  for (int t = 1; t <= steps; ++t) {
    for (std::size_t i = 0; i < th.size(); ++i) {
      double d = kGrads[t - 1][i] + c.weight_decay * th[i];
      if (c.momentum != 0) {
        buf[i] = t == 1 ? d : c.momentum * buf[i] + d;
        d = buf[i];
      }
      th[i] -= c.lr * d;
    }
  }
  return th;
}

TEST(Sgd, MomentumAndWeightDecayMatchAHandComputedThreeStepTrajectory) {
  const SgdConfig c{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01};
  Tensor theta = vec(kTheta0);
  Sgd opt({theta}, c);
  for (int t = 1; t <= 3; ++t) {
    opt.step(std::vector<Tensor>{vec(kGrads[t - 1])});
    expect_close(theta.to_floats(), sgd_reference(c, t), 1e-6, "theta");
  }
  EXPECT_EQ(opt.step_count(), 3);
}

TEST(Sgd, FirstStepBufferIsTheGradientItself) {
  Tensor theta = vec(kTheta0);
  Sgd opt({theta}, {.lr = 0.1, .momentum = 0.9});
  opt.step(std::vector<Tensor>{vec(kGrads[0])});
  EXPECT_EQ(opt.momentum_buffer(0).to_floats(), kGrads[0]);
}

TEST(Sgd, PlainSgdKeepsNoBuffer) {
  MemoryLedger ledger;
  LedgerScope scope(ledger);
  Tensor theta = vec(kTheta0);
  Sgd opt({theta}, {.lr = 0.5});
  EXPECT_EQ(ledger.live(MemCategory::kOptimizerState), 0u);
  EXPECT_FALSE(opt.momentum_buffer(0).defined());
  opt.step(std::vector<Tensor>{vec(kGrads[0])});
  expect_close(theta.to_floats(), sgd_reference({.lr = 0.5}, 1), 1e-7, "theta");
}

TEST(Clip, NormAboveThresholdScalesByMaxNormOverNorm) {
  Tensor g1 = vec({3.0f, 4.0f}), g2 = vec({12.0f});  // global norm sqrt(9 + 16 + 144) = 13
  const std::vector<Tensor> grads{g1, g2};
  EXPECT_DOUBLE_EQ(global_grad_norm(grads), 13.0);
  EXPECT_DOUBLE_EQ(clip_grad_norm(grads, 1.0), 13.0) << "returns the norm before clipping";
  const double coef = 1.0 / (13.0 + 1e-6);
  EXPECT_FLOAT_EQ(g1.to_floats()[0], static_cast<float>(3 * coef));
  EXPECT_FLOAT_EQ(g1.to_floats()[1], static_cast<float>(4 * coef));
  EXPECT_FLOAT_EQ(g2.to_floats()[0], static_cast<float>(12 * coef));
  EXPECT_NEAR(global_grad_norm(grads), 1.0, 1e-6);
}

TEST(Clip, NormBelowThresholdLeavesGradientsBitIdentical) {
  Tensor g1 = vec({3.0f, 4.0f}), g2 = vec({12.0f});
  const std::vector<Tensor> grads{g1, g2};
  EXPECT_DOUBLE_EQ(clip_grad_norm(grads, 13.5), 13.0);
  EXPECT_EQ(g1.to_floats(), (std::vector<float>{3.0f, 4.0f}));
  EXPECT_EQ(g2.to_floats(), (std::vector<float>{12.0f}));
}

TEST(Clip, CoefficientFollowsPyTorch) {
  EXPECT_DOUBLE_EQ(clip_coefficient(13.0, 1.0), 1.0 / (13.0 + 1e-6));
  EXPECT_EQ(clip_coefficient(0.0, 1.0), 1.0);  // max_norm / 1e-6, clamped
  EXPECT_EQ(clip_coefficient(13.0, 13.0), 13.0 / (13.0 + 1e-6)) << "at the threshold: just below 1";
  EXPECT_TRUE(std::isnan(clip_coefficient(std::nan(""), 1.0)));
}

TEST(Clip, NonFiniteNormPoisonsTheGradientsAsInPyTorch) {
  Tensor g1 = vec({INFINITY, 1.0f}), g2 = vec({2.0f});
  const std::vector<Tensor> grads{g1, g2};
  EXPECT_TRUE(std::isinf(clip_grad_norm(grads, 1.0)));
  // coef = 1 / inf = 0: finite grads become 0, the inf becomes inf * 0 = NaN.
  EXPECT_TRUE(ops::has_inf_or_nan(g1));
  EXPECT_EQ(g2.to_floats()[0], 0.0f);
}

TEST(Clip, WorksOnSixteenBitGradients) {
  Tensor g = vec({3.0f, 4.0f}).to(DType::kF16);
  const std::vector<Tensor> grads{g};
  EXPECT_DOUBLE_EQ(clip_grad_norm(grads, 2.5), 5.0);
  EXPECT_NEAR(g.to_floats()[0], 1.5, 1e-3);
  EXPECT_NEAR(g.to_floats()[1], 2.0, 1e-3);
}

}  // namespace
}  // namespace mixpar
