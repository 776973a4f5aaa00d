// The MLP of chapters 2 and 3: gradients against finite differences (f64 model), the working
// dtypes against each other, loss scaling, the ledger categories, the teacher task's
// determinism, and training that actually reduces the loss.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "model/mlp.h"
#include "util/errors.h"
#include "ops/reductions.h"
#include "optim/adamw.h"
#include "ops_test_util.h"

namespace mixpar {
namespace {

using testing::finite_difference;
using testing::to_doubles;

MlpConfig small_config(DType dtype, ops::Activation act, LossKind loss) {
  MlpConfig c;
  c.sizes = {5, 7, 6, 3};
  c.activation = act;
  c.loss = loss;
  c.dtype = dtype;
  c.seed = 42;
  return c;
}

TeacherTask small_task(LossKind loss) {
  TeacherTaskConfig t;
  t.sizes = {5, 8, 3};
  t.loss = loss;
  t.seed = 7;
  return TeacherTask(t);
}

void check_gradients_against_finite_differences(ops::Activation act, LossKind loss) {
  Mlp model(small_config(DType::kF64, act, loss));
  const Batch batch = small_task(loss).batch(0, 4);
  model.forward_loss(batch);
  model.backward(batch);
  const auto params = model.parameters();
  const auto grads = model.gradients();
  for (std::size_t i = 0; i < params.size(); ++i) {
    Tensor p = params[i].tensor;
    const auto numeric = finite_difference(p, [&] { return model.forward_loss(batch); });
    const auto analytic = to_doubles(grads[i].tensor);
    for (std::size_t j = 0; j < numeric.size(); ++j) {
      ASSERT_NEAR(analytic[j], numeric[j], 1e-7 * std::max(1.0, std::fabs(numeric[j])))
          << params[i].name << "[" << j << "] " << ops::activation_name(act);
    }
  }
}

TEST(Mlp, GeluMseGradientsMatchFiniteDifferences) {
  check_gradients_against_finite_differences(ops::Activation::kGelu, LossKind::kMse);
}

TEST(Mlp, ReluCrossEntropyGradientsMatchFiniteDifferences) {
  check_gradients_against_finite_differences(ops::Activation::kRelu, LossKind::kCrossEntropy);
}

TEST(Mlp, SameSeedGivesTheRoundedFp32WeightsInEveryDtype) {
  Mlp m32(small_config(DType::kF32, ops::Activation::kGelu, LossKind::kMse));
  for (DType dt : {DType::kF16, DType::kBF16}) {
    Mlp m(small_config(dt, ops::Activation::kGelu, LossKind::kMse));
    for (int l = 0; l < m.num_layers(); ++l) {
      EXPECT_EQ(m.weight(l).to_floats(), m32.weight(l).to(dt).to_floats()) << dtype_name(dt);
    }
  }
}

TEST(Mlp, Fp32GradientsAgreeWithTheF64Model) {
  Mlp m32(small_config(DType::kF32, ops::Activation::kGelu, LossKind::kMse));
  Mlp m64(small_config(DType::kF64, ops::Activation::kGelu, LossKind::kMse));
  const Batch batch = small_task(LossKind::kMse).batch(0, 16);
  EXPECT_NEAR(m32.forward_loss(batch), m64.forward_loss(batch), 1e-6);
  m32.backward(batch);
  m64.backward(batch);
  const auto g32 = m32.gradients(), g64 = m64.gradients();
  for (std::size_t i = 0; i < g32.size(); ++i) {
    const auto a = to_doubles(g32[i].tensor), b = to_doubles(g64[i].tensor);
    for (std::size_t j = 0; j < a.size(); ++j) EXPECT_NEAR(a[j], b[j], 1e-6) << g32[i].name;
  }
}

TEST(Mlp, LossScaleMultipliesEveryGradientExactly) {
  // A power-of-two scale commutes with every FP32 rounding (no overflow or underflow here),
  // so the scaled gradients are the unscaled ones times 1024, bit for bit.
  Mlp model(small_config(DType::kF32, ops::Activation::kGelu, LossKind::kCrossEntropy));
  const Batch batch = small_task(LossKind::kCrossEntropy).batch(3, 8);
  model.forward_loss(batch);
  model.backward(batch, 1.0f);
  std::vector<std::vector<float>> plain;
  for (const auto& g : model.gradients()) plain.push_back(g.tensor.to_floats());
  model.backward(batch, 1024.0f);
  const auto scaled = model.gradients();
  for (std::size_t i = 0; i < scaled.size(); ++i) {
    const auto s = scaled[i].tensor.to_floats();
    for (std::size_t j = 0; j < s.size(); ++j) ASSERT_EQ(s[j], 1024.0f * plain[i][j]) << scaled[i].name;
  }
}

TEST(Mlp, HugeLossScaleOverflowsFp16GradientsButNotBf16) {
  const Batch batch = small_task(LossKind::kMse).batch(0, 8);
  for (DType dt : {DType::kF16, DType::kBF16}) {
    Mlp model(small_config(dt, ops::Activation::kGelu, LossKind::kMse));
    model.forward_loss(batch);
    model.backward(batch, 0x1p30f);
    std::int64_t nonfinite = 0;
    for (const auto& g : model.gradients()) nonfinite += ops::count_nonfinite(g.tensor);
    if (dt == DType::kF16) EXPECT_GT(nonfinite, 0) << "2^30 times O(1e-2) gradients exceeds 65504";
    else EXPECT_EQ(nonfinite, 0) << "bf16 has FP32's range";
  }
}

TEST(Mlp, AccumulateAddsMicroBatchGradients) {
  Mlp model(small_config(DType::kF32, ops::Activation::kGelu, LossKind::kMse));
  const Batch batch = small_task(LossKind::kMse).batch(0, 8);
  model.forward_loss(batch);
  model.backward(batch);
  const auto once = model.grad_weight(0).to_floats();
  model.backward(batch, 1.0f, /*accumulate=*/true);
  const auto twice = model.grad_weight(0).to_floats();
  for (std::size_t j = 0; j < once.size(); ++j) EXPECT_EQ(twice[j], 2 * once[j]);
  model.zero_grad();
  EXPECT_EQ(ops::count_zeros(model.grad_weight(0)), model.grad_weight(0).numel());
}

TEST(Mlp, ParametersGradientsAndActivationsAreChargedToTheirCategories) {
  MemoryLedger ledger;
  LedgerScope scope(ledger);
  Mlp model(small_config(DType::kBF16, ops::Activation::kGelu, LossKind::kMse));
  const std::int64_t n = 5 * 7 + 7 + 7 * 6 + 6 + 6 * 3 + 3;
  EXPECT_EQ(model.num_parameters(), n);
  EXPECT_EQ(ledger.live(MemCategory::kParameters), static_cast<std::size_t>(2 * n));
  EXPECT_EQ(ledger.live(MemCategory::kGradients), static_cast<std::size_t>(2 * n));
  const std::int64_t b = 4;
  Tensor x = Tensor::zeros({b, 5}, DType::kF32);
  model.forward(x);
  // Kept for backward: the input, each hidden pre-activation and activation, the output:
  // B (in + 2 * sum(hidden) + out) elements in the working dtype.
  EXPECT_EQ(ledger.live(MemCategory::kActivations), static_cast<std::size_t>(2 * b * (5 + 2 * (7 + 6) + 3)));
  // The teacher of a task keeps its weights on its own ledger: the bill shows the student only.
  const TeacherTask task = small_task(LossKind::kMse);
  EXPECT_EQ(ledger.live(MemCategory::kParameters), static_cast<std::size_t>(2 * n));
}

TEST(Mlp, ParameterNamesFollowTheLayers) {
  Mlp model(small_config(DType::kF32, ops::Activation::kGelu, LossKind::kMse));
  const auto p = model.parameters();
  ASSERT_EQ(p.size(), 6u);
  EXPECT_EQ(p[0].name, "fc0.weight");
  EXPECT_EQ(p[0].tensor.shape(), (Shape{5, 7}));
  EXPECT_EQ(p[5].name, "fc2.bias");
  EXPECT_EQ(model.gradients()[5].name, "fc2.bias");
}

TEST(Mlp, TeacherSamplesAreAPureFunctionOfTheirIndex) {
  const TeacherTask task = small_task(LossKind::kMse);
  const Batch whole = task.samples(10, 6);
  const Batch first = task.samples(10, 2), rest = task.samples(12, 4);
  const auto wx = whole.x.to_floats(), wy = whole.y.to_floats();
  std::vector<float> x = first.x.to_floats(), y = first.y.to_floats();
  const auto rx = rest.x.to_floats(), ry = rest.y.to_floats();
  x.insert(x.end(), rx.begin(), rx.end());
  y.insert(y.end(), ry.begin(), ry.end());
  EXPECT_EQ(x, wx);
  EXPECT_EQ(y, wy);
  EXPECT_NE(task.batch(0, 6).x.to_floats(), wx);
}

TEST(Mlp, TeacherClassesAreAllUsed) {
  const Batch b = small_task(LossKind::kCrossEntropy).batch(0, 256);
  std::vector<int> counts(3, 0);
  for (std::int32_t label : b.labels) ++counts[static_cast<std::size_t>(label)];
  for (int c : counts) EXPECT_GT(c, 256 / 10) << "a degenerate teacher gives one class";
}

// Trains the 32 -> 64 -> 64 -> 10 model with AdamW on the default teacher task and returns
// the held-out loss before and after.
std::pair<double, double> train(LossKind loss, int steps) {
  MlpConfig c;
  c.loss = loss;
  Mlp model(c);
  TeacherTaskConfig tc;
  tc.loss = loss;
  const TeacherTask task(tc);
  const Batch eval = task.samples(1'000'000, 256);
  const double before = model.forward_loss(eval);
  AdamW opt(tensors_of(model.parameters()), {.lr = 1e-2, .weight_decay = 0});
  const auto grads = tensors_of(model.gradients());
  for (int s = 0; s < steps; ++s) {
    const Batch b = task.batch(s, 64);
    model.forward_loss(b);
    model.backward(b);
    opt.step(grads);
  }
  return {before, model.forward_loss(eval)};
}

TEST(Mlp, Fp32RegressionTrainingCutsHeldOutLossTenfoldIn300Steps) {
  // Measured: 7.81 -> 0.53 (15x).
  const auto [before, after] = train(LossKind::kMse, 300);
  EXPECT_LT(after, before / 10) << "before " << before << " after " << after;
}

TEST(Mlp, Fp32ClassificationTrainingHalvesHeldOutLossIn300Steps) {
  // Measured: 2.36 -> 1.01 (the argmax of a random teacher has hard boundaries).
  const auto [before, after] = train(LossKind::kCrossEntropy, 300);
  EXPECT_LT(after, before / 2) << "before " << before << " after " << after;
}

TEST(Mlp, BadConfigurationsAreInputErrors) {
  MlpConfig c;
  c.sizes = {4};
  EXPECT_THROW(Mlp{c}, InputError);
  c.sizes = {4, 0, 2};
  EXPECT_THROW(Mlp{c}, InputError);
  Mlp ok(small_config(DType::kF32, ops::Activation::kGelu, LossKind::kMse));
  EXPECT_THROW(ok.forward(Tensor::zeros({2, 4}, DType::kF32)), std::invalid_argument);
}

}  // namespace
}  // namespace mixpar
