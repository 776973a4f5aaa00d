// Every backward of common/ops against central finite differences of its own forward in FP64
// (h = 1e-6, truncation error ~1e-12), and the forwards against independent formulas and
// golden values. A second pass checks that FP32 backward agrees with FP64 to FP32 accuracy.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "ops/activations.h"
#include "ops/linear.h"
#include "ops/loss.h"
#include "ops_test_util.h"

namespace mixpar {
namespace {

using testing::finite_difference;
using testing::random_tensor;
using testing::to_doubles;
using testing::weighted_sum;

constexpr double kFdTol = 1e-7;  // relative to max(1, |grad|)

void expect_grad_near(const std::vector<double>& analytic, const std::vector<double>& numeric,
                      const char* what) {
  ASSERT_EQ(analytic.size(), numeric.size()) << what;
  for (std::size_t i = 0; i < analytic.size(); ++i) {
    const double tol = kFdTol * std::max(1.0, std::fabs(numeric[i]));
    ASSERT_NEAR(analytic[i], numeric[i], tol) << what << " element " << i;
  }
}

TEST(OpsLinear, ForwardIsXTimesWPlusBias) {
  Tensor x = Tensor::from_floats(std::vector<float>{1, 2, 3, 4}, {2, 2});
  Tensor w = Tensor::from_floats(std::vector<float>{1, 0, -1, 0.5f, 2, 1}, {2, 3});  // [in 2, out 3]
  Tensor b = Tensor::from_floats(std::vector<float>{0.25f, 0, -1}, {3});
  Tensor y = Tensor::empty({2, 3}, DType::kF32);
  ops::linear_forward(x, w, &b, y);
  // row 0: [1*1 + 2*0.5, 1*0 + 2*2, -1 + 2*1] + b = [2.25, 4, 0]
  // row 1: [3 + 2, 0 + 8, -3 + 4] + b = [5.25, 8, 0]
  EXPECT_EQ(y.to_floats(), (std::vector<float>{2.25f, 4, 0, 5.25f, 8, 0}));
}

TEST(OpsLinear, BackwardMatchesFiniteDifferences) {
  const std::int64_t bsz = 3, in = 4, out = 5;
  Tensor x = random_tensor({bsz, in}, DType::kF64, 1), w = random_tensor({in, out}, DType::kF64, 2);
  Tensor b = random_tensor({out}, DType::kF64, 3), y = Tensor::empty({bsz, out}, DType::kF64);
  Tensor dy = random_tensor({bsz, out}, DType::kF64, 4);  // L = sum dy * y
  const std::vector<double> r = to_doubles(dy);
  auto loss = [&] { ops::linear_forward(x, w, &b, y); return weighted_sum(y, r); };
  Tensor dx = Tensor::empty({bsz, in}, DType::kF64), dw = Tensor::empty({in, out}, DType::kF64);
  Tensor db = Tensor::empty({out}, DType::kF64);
  ops::linear_backward(x, w, dy, &dx, dw, &db);
  expect_grad_near(to_doubles(dx), finite_difference(x, loss), "dx");
  expect_grad_near(to_doubles(dw), finite_difference(w, loss), "dw");
  expect_grad_near(to_doubles(db), finite_difference(b, loss), "db");
}

TEST(OpsLinear, AccumulateAddsToWeightAndBiasGradients) {
  Tensor x = random_tensor({3, 4}, DType::kF32, 1), w = random_tensor({4, 2}, DType::kF32, 2);
  Tensor dy = random_tensor({3, 2}, DType::kF32, 3);
  Tensor dw = Tensor::empty({4, 2}, DType::kF32), db = Tensor::empty({2}, DType::kF32);
  ops::linear_backward(x, w, dy, nullptr, dw, &db);
  const std::vector<float> dw1 = dw.to_floats(), db1 = db.to_floats();
  ops::linear_backward(x, w, dy, nullptr, dw, &db, /*accumulate=*/true);
  const std::vector<float> dw2 = dw.to_floats(), db2 = db.to_floats();
  for (std::size_t i = 0; i < dw1.size(); ++i) EXPECT_EQ(dw2[i], 2 * dw1[i]);  // x + x is exact
  for (std::size_t i = 0; i < db1.size(); ++i) EXPECT_EQ(db2[i], 2 * db1[i]);
}

TEST(OpsLinear, Bf16LayerMatchesFp32LayerToBf16Precision) {
  Tensor x = random_tensor({8, 16}, DType::kF32, 1), w = random_tensor({16, 8}, DType::kF32, 2);
  Tensor b = random_tensor({8}, DType::kF32, 3);
  Tensor y32 = Tensor::empty({8, 8}, DType::kF32), y16 = Tensor::empty({8, 8}, DType::kBF16);
  ops::linear_forward(x, w, &b, y32);
  ops::linear_forward(x.to(DType::kBF16), w.to(DType::kBF16), &b, y16);
  const auto a = y32.to_floats(), c = y16.to_floats();
  // Inputs rounded to bf16 (rel 2^-9 each) over 16 terms of size <= 1, plus the output rounding.
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(c[i], a[i], 16 * 2 * 0x1p-9 + 0x1p-8 * std::fabs(a[i]));
}

TEST(OpsLinear, WorksOnRowViewsOfALargerTensor) {
  // Views start at an offset into shared storage: rows 2..4 of x and of y.
  Tensor x = random_tensor({6, 4}, DType::kF16, 1), w = random_tensor({4, 3}, DType::kF32, 2);
  Tensor y = Tensor::zeros({6, 3}, DType::kF32), y_ref = Tensor::empty({3, 3}, DType::kF32);
  Tensor xv = x.rows(2, 3), yv = y.rows(2, 3);
  ops::linear_forward(xv, w, nullptr, yv);
  ops::linear_forward(xv.clone(), w, nullptr, y_ref);
  EXPECT_EQ(yv.to_floats(), y_ref.to_floats());
  EXPECT_EQ(y.rows(0, 2).to_floats(), std::vector<float>(6, 0.0f)) << "rows outside the view untouched";
}

TEST(OpsActivations, GeluMatchesTheTanhFormulaAndGoldenValues) {
  Tensor x = Tensor::from_floats(std::vector<float>{1.0f, -1.0f, 2.0f, 0.0f}, {4});
  Tensor y = Tensor::empty({4}, DType::kF32);
  ops::gelu_forward(x, y);
  const auto v = y.to_floats();
  // 0.5 x (1 + tanh(sqrt(2/pi)(x + 0.044715 x^3))) evaluated in double.
  EXPECT_NEAR(v[0], 0.8411919906082768, 1e-6);
  EXPECT_NEAR(v[1], -0.15880800939172324, 1e-6);
  EXPECT_NEAR(v[2], 1.954597694087775, 1e-6);
  EXPECT_EQ(v[3], 0.0f);
  // Far tails: GELU(x) -> x and -> 0, and its gradient -> 1 and -> 0, with no NaN.
  Tensor tails = Tensor::from_floats(std::vector<float>{30.0f, -30.0f, 1e20f, -1e20f}, {4});
  Tensor dtails = Tensor::empty({4}, DType::kF32), ones = Tensor::empty({4}, DType::kF32);
  ones.fill(1.0f);
  ops::gelu_forward(tails, y);
  ops::gelu_backward(tails, ones, dtails);
  EXPECT_EQ(y.to_floats()[0], 30.0f);
  EXPECT_EQ(y.to_floats()[1], 0.0f);
  EXPECT_EQ(dtails.to_floats(), (std::vector<float>{1.0f, 0.0f, 1.0f, 0.0f}));
}

TEST(OpsActivations, ReluKeepsNaNAndSelectsGradientsWithoutInfTimesZero) {
  Tensor x = Tensor::from_floats(std::vector<float>{-1.0f, 2.0f, std::nanf(""), 0.0f}, {4});
  Tensor y = Tensor::empty({4}, DType::kF32);
  ops::relu_forward(x, y);
  const auto v = y.to_floats();
  EXPECT_EQ(v[0], 0.0f);
  EXPECT_EQ(v[1], 2.0f);
  EXPECT_TRUE(std::isnan(v[2])) << "a NaN must reach the overflow check";
  const float inf = INFINITY;
  Tensor dy = Tensor::from_floats(std::vector<float>{inf, 3.0f, 1.0f, 5.0f}, {4});
  Tensor dx = Tensor::empty({4}, DType::kF32);
  ops::relu_backward(x, dy, dx);
  EXPECT_EQ(dx.to_floats(), (std::vector<float>{0.0f, 3.0f, 1.0f, 0.0f}));
}

void check_activation_backward(ops::Activation act) {
  // Inputs away from ReLU's kink at 0 (finite differences need a smooth neighbourhood).
  Tensor x = random_tensor({3, 7}, DType::kF64, 5, 0.1f, 3.0f);
  std::vector<double> xs = to_doubles(x);
  for (std::size_t i = 0; i < xs.size(); i += 2) xs[i] = -xs[i];
  convert(xs.data(), DType::kF64, x.data(), DType::kF64, xs.size());
  Tensor y = Tensor::empty(x.shape(), DType::kF64), dy = random_tensor(x.shape(), DType::kF64, 6);
  const std::vector<double> r = to_doubles(dy);
  auto loss = [&] { ops::activation_forward(act, x, y); return weighted_sum(y, r); };
  Tensor dx = Tensor::empty(x.shape(), DType::kF64);
  ops::activation_backward(act, x, dy, dx);
  expect_grad_near(to_doubles(dx), finite_difference(x, loss), std::string(ops::activation_name(act)).c_str());
}

TEST(OpsActivations, GeluBackwardMatchesFiniteDifferences) { check_activation_backward(ops::Activation::kGelu); }
TEST(OpsActivations, ReluBackwardMatchesFiniteDifferences) { check_activation_backward(ops::Activation::kRelu); }

TEST(OpsActivations, Fp32BackwardAgreesWithF64) {
  Tensor x = random_tensor({64}, DType::kF32, 7, -4.0f, 4.0f), dy = random_tensor({64}, DType::kF32, 8);
  Tensor dx32 = Tensor::empty({64}, DType::kF32), dx64 = Tensor::empty({64}, DType::kF64);
  ops::gelu_backward(x, dy, dx32);
  ops::gelu_backward(x.to(DType::kF64), dy.to(DType::kF64), dx64);
  const auto a = to_doubles(dx32), b = to_doubles(dx64);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], 1e-6) << i;
}

TEST(OpsLoss, CrossEntropyGoldenValue) {
  // -log softmax([1, 2, 3])[2] = log(e + e^2 + e^3) - 3.
  Tensor z = Tensor::from_floats(std::vector<float>{1, 2, 3}, {1, 3});
  const std::vector<std::int32_t> label{2};
  EXPECT_NEAR(ops::cross_entropy_loss(z, label), 0.40760596444438013, 1e-6);
}

TEST(OpsLoss, CrossEntropyGradientMatchesFiniteDifferences) {
  Tensor z = random_tensor({4, 6}, DType::kF64, 9, -3.0f, 3.0f);
  const std::vector<std::int32_t> labels{0, 5, 2, 2};
  Tensor dz = Tensor::empty(z.shape(), DType::kF64);
  ops::cross_entropy_loss(z, labels, &dz);
  expect_grad_near(to_doubles(dz), finite_difference(z, [&] { return ops::cross_entropy_loss(z, labels); }), "dlogits");
}

TEST(OpsLoss, CrossEntropyIsStableForHugeLogits) {
  Tensor z = Tensor::from_floats(std::vector<float>{1000.0f, 0.0f, -1000.0f}, {1, 3});
  const std::vector<std::int32_t> label{0};
  Tensor dz = Tensor::empty({1, 3}, DType::kF32);
  EXPECT_NEAR(ops::cross_entropy_loss(z, label, &dz), 0.0, 1e-12);
  for (float g : dz.to_floats()) EXPECT_TRUE(std::isfinite(g));
}

TEST(OpsLoss, MseValueAndGradientMatchFiniteDifferences) {
  Tensor p = random_tensor({3, 5}, DType::kF64, 10), t = random_tensor({3, 5}, DType::kF64, 11);
  Tensor dp = Tensor::empty(p.shape(), DType::kF64);
  const double loss = ops::mse_loss(p, t, &dp);
  const auto pv = to_doubles(p), tv = to_doubles(t);
  double ref = 0;
  for (std::size_t i = 0; i < pv.size(); ++i) ref += (pv[i] - tv[i]) * (pv[i] - tv[i]) / 15.0;
  EXPECT_NEAR(loss, ref, 1e-15);
  expect_grad_near(to_doubles(dp), finite_difference(p, [&] { return ops::mse_loss(p, t); }), "dpred");
}

TEST(OpsLoss, GradScaleActsBeforeTheFp16RoundingSoTinyGradientsSurvive) {
  // dpred = 2 (p - t) / N = 2e-6 / 1024 ~ 2e-9: below fp16's smallest subnormal (6e-8).
  const std::int64_t n = 1024;
  Tensor p = Tensor::zeros({n}, DType::kF32);
  Tensor t = Tensor::empty({n}, DType::kF32);
  t.fill(-1e-6f);
  Tensor d16 = Tensor::empty({n}, DType::kF16);
  ops::mse_loss(p, t, &d16);
  EXPECT_EQ(d16.to_floats()[0], 0.0f) << "unscaled fp16 gradient underflows";
  ops::mse_loss(p, t, &d16, 65536.0f);
  const double unscaled = d16.to_floats()[0] / 65536.0;
  EXPECT_NEAR(unscaled, 2e-6 / n, 2e-6 / n * 1e-3) << "scaled by 2^16 it survives";
}

TEST(OpsLoss, CrossEntropyGradScaleMultipliesTheGradientExactly) {
  Tensor z = random_tensor({4, 6}, DType::kF32, 12);
  const std::vector<std::int32_t> labels{1, 2, 3, 4};
  Tensor d1 = Tensor::empty(z.shape(), DType::kF32), d8 = Tensor::empty(z.shape(), DType::kF32);
  const double l1 = ops::cross_entropy_loss(z, labels, &d1);
  const double l8 = ops::cross_entropy_loss(z, labels, &d8, 8.0f);
  EXPECT_EQ(l1, l8) << "the returned loss is never scaled";
  const auto a = d1.to_floats(), b = d8.to_floats();
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(b[i], 8 * a[i]);
}

TEST(OpsLoss, LabelsOutOfRangeAreRejected) {
  Tensor z = Tensor::zeros({2, 3}, DType::kF32);
  const std::vector<std::int32_t> bad{0, 3};
  EXPECT_THROW(ops::cross_entropy_loss(z, bad), std::out_of_range);
  const std::vector<std::int32_t> short_labels{0};
  EXPECT_THROW(ops::cross_entropy_loss(z, short_labels), std::invalid_argument);
}

}  // namespace
}  // namespace mixpar
