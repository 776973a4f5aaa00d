// Reductions and elementwise arithmetic: exact counts of underflowed zeros and of overflowed
// values after rounding into 16-bit formats, FP64-accumulated sums, scale/axpy/add semantics.
#include <gtest/gtest.h>

#include <cmath>
#include <thread>
#include <vector>

#include "ops/compute_threads.h"
#include "ops/elementwise.h"
#include "ops/reductions.h"
#include "ops_test_util.h"

namespace mixpar {
namespace {

TEST(OpsReductions, CountZerosSeesFp16Underflow) {
  // 1e-8 rounds to 0 in fp16; 6e-8 to the smallest subnormal 2^-24; 1e-3 is normal.
  const std::vector<float> v{1e-8f, 6e-8f, 1e-3f, 0.0f, -0.0f};
  EXPECT_EQ(ops::count_zeros(Tensor::from_floats(v, {5}, DType::kF16)), 3);
  EXPECT_EQ(ops::count_zeros(Tensor::from_floats(v, {5}, DType::kBF16)), 2);
  EXPECT_EQ(ops::count_zeros(Tensor::from_floats(v, {5}, DType::kF32)), 2);
}

TEST(OpsReductions, NonFiniteChecksSeeFp16OverflowButNotBf16) {
  const std::vector<float> v{70000.0f, 1.0f, -65519.0f};
  Tensor h = Tensor::from_floats(v, {3}, DType::kF16);
  EXPECT_EQ(ops::count_nonfinite(h), 1);  // 70000 -> inf; 65519 -> 65504 (finite)
  EXPECT_TRUE(ops::has_inf_or_nan(h));
  EXPECT_FALSE(ops::has_inf_or_nan(Tensor::from_floats(v, {3}, DType::kBF16)));
  Tensor n = Tensor::from_floats(std::vector<float>{1.0f, std::nanf("")}, {2}, DType::kBF16);
  EXPECT_TRUE(ops::has_inf_or_nan(n));
  EXPECT_TRUE(std::isnan(ops::max_abs(n)));
}

TEST(OpsReductions, SumOfSquaresIsAccumulatedInFp64) {
  // 2^20 copies of 0.1f. Every square is exact in double, so only the 2^20 additions round:
  // relative error ~1e-12. The naive FP32 running sum below drifts by more than 1e-3.
  const std::int64_t n = 1 << 20;
  Tensor t = Tensor::empty({n}, DType::kF32);
  t.fill(0.1f);
  const double x = static_cast<double>(0.1f);
  const double want_sq = static_cast<double>(n) * x * x, want = static_cast<double>(n) * x;
  float naive = 0.0f;
  for (std::int64_t i = 0; i < n; ++i) naive += 0.1f * 0.1f;
  EXPECT_GT(std::fabs(naive - want_sq) / want_sq, 1e-3);
  EXPECT_NEAR(ops::sum_of_squares(t), want_sq, 1e-10 * want_sq);
  EXPECT_NEAR(ops::sum(t), want, 1e-10 * want);
}

// The global norm's pass: each tensor's sum of squares from sums_of_squares has the bits of
// sum_of_squares on that tensor, on one thread and on two (tensors of every dtype and size,
// large enough that the threads are used).
TEST(OpsReductions, SumsOfSquaresOfManyTensorsHaveEachTensorsBitsOnAnyThreadCount) {
  std::vector<Tensor> ts;
  const DType types[] = {DType::kF32, DType::kBF16, DType::kF16, DType::kF64};
  for (int i = 0; i < 9; ++i) {
    ts.push_back(testing::random_tensor({1000 + 7919 * i}, types[i % 4], 50 + i, -3.0f, 3.0f));
  }
  std::vector<double> want;
  for (const Tensor& t : ts) want.push_back(ops::sum_of_squares(t));
  for (const int threads : {1, 2}) {
    std::vector<double> got;
    // On a thread of its own: the team size belongs to the calling thread (compute_threads.h).
    std::thread([&] {
      ops::set_compute_threads(threads);
      got = ops::sums_of_squares(ts);
    }).join();
    ASSERT_EQ(got.size(), want.size());
    for (std::size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i], want[i]) << "tensor " << i << ", " << threads << " threads";
    }
  }
  EXPECT_TRUE(ops::sums_of_squares({}).empty());
}

TEST(OpsReductions, MaxAbsAndSumOnMixedSigns) {
  Tensor t = Tensor::from_floats(std::vector<float>{-3.0f, 2.0f, 0.5f}, {3}, DType::kBF16);
  EXPECT_EQ(ops::max_abs(t), 3.0);
  EXPECT_EQ(ops::sum(t), -0.5);
  EXPECT_EQ(ops::max_abs(Tensor::empty({0}, DType::kF32)), 0.0);
}

TEST(OpsElementwise, ScaleRoundsIntoTheTensorsDtypeAndCanOverflow) {
  Tensor h = Tensor::from_floats(std::vector<float>{1.0f, 2.0f}, {2}, DType::kF16);
  ops::scale(h, 40000.0);
  const auto v = h.to_floats();
  EXPECT_EQ(v[0], 40000.0f);
  EXPECT_TRUE(std::isinf(v[1])) << "80000 overflows fp16";
  Tensor b = Tensor::from_floats(std::vector<float>{1.0f, 2.0f}, {2}, DType::kBF16);
  ops::scale(b, 40000.0);
  EXPECT_EQ(ops::count_nonfinite(b), 0);
}

TEST(OpsElementwise, AxpyAndAddMixDtypes) {
  Tensor x = Tensor::from_floats(std::vector<float>{1.0f, -2.0f, 0.5f}, {3}, DType::kBF16);
  Tensor y = Tensor::from_floats(std::vector<float>{10.0f, 20.0f, 30.0f}, {3}, DType::kF32);
  ops::axpy(0.5, x, y);
  EXPECT_EQ(y.to_floats(), (std::vector<float>{10.5f, 19.0f, 30.25f}));
  Tensor out = Tensor::empty({3}, DType::kF16);
  ops::add(x, y, out);
  EXPECT_EQ(out.to_floats(), (std::vector<float>{11.5f, 17.0f, 30.75f}));
  ops::add(y, y, y);  // in place
  EXPECT_EQ(y.to_floats(), (std::vector<float>{21.0f, 38.0f, 60.5f}));
}

TEST(OpsElementwise, SwampingInBf16IsVisibleThroughAxpy) {
  // 1 + 1e-3 == 1 in bf16 (eps 2^-7): the update is swallowed, the FP32 copy keeps it.
  Tensor w16 = Tensor::from_floats(std::vector<float>{1.0f}, {1}, DType::kBF16);
  Tensor w32 = Tensor::from_floats(std::vector<float>{1.0f}, {1}, DType::kF32);
  Tensor g = Tensor::from_floats(std::vector<float>{1.0f}, {1}, DType::kF32);
  ops::axpy(1e-3, g, w16);
  ops::axpy(1e-3, g, w32);
  EXPECT_EQ(w16.item(), 1.0f);
  EXPECT_NEAR(w32.item(), 1.001f, 1e-7);
}

TEST(OpsElementwise, ChunkBoundariesDoNotChangeResults) {
  // 2500 elements span three 1024-element chunks; every element must see the same formula.
  const std::int64_t n = 2500;
  Tensor x = testing::random_tensor({n}, DType::kBF16, 1), y = testing::random_tensor({n}, DType::kF16, 2);
  const std::vector<float> xs = x.to_floats(), ys = y.to_floats();
  ops::axpy(0.75, x, y);
  const std::vector<float> got = y.to_floats();
  for (std::int64_t i = 0; i < n; ++i) {
    const std::size_t k = static_cast<std::size_t>(i);
    ASSERT_EQ(got[k], round_to(DType::kF16, ys[k] + 0.75f * xs[k])) << "element " << i;
  }
}

TEST(OpsElementwise, CudaAndFp8TensorsAreRejectedClearly) {
  Tensor f8 = Tensor::zeros({2}, DType::kE5M2);
  try {
    ops::scale(f8, 2.0);
    FAIL() << "fp8 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("e5m2"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mixpar
