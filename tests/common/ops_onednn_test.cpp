// ops::matmul's oneDNN path for 16-bit operands (ops/onednn_matmul.h): where this CPU has it,
// each GEMM (every transpose, alpha, beta, f32 and 16-bit outputs) agrees with the exact product
// within the bound of an FP32-accumulated GEMM rounded once; where it does not, the test says
// why and skips, and every 16-bit GEMM takes the software path. The switch keeps the software
// path selectable either way.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "ops/linear.h"
#include "ops/matmul.h"
#include "ops/onednn_matmul.h"
#include "ops_test_util.h"

namespace mixpar {
namespace {

using testing::random_tensor;
using testing::reference_gemm;
using testing::to_doubles;

// Restores the switch as the test found it.
class OnednnSwitch {
 public:
  explicit OnednnSwitch(bool on) : was_(ops::onednn_matmul_enabled()) { ops::set_onednn_matmul(on); }
  ~OnednnSwitch() { ops::set_onednn_matmul(was_); }
  OnednnSwitch(const OnednnSwitch&) = delete;
  OnednnSwitch& operator=(const OnednnSwitch&) = delete;

 private:
  bool was_;
};

// The spacing of `dtype`'s numbers at magnitude v (its smallest subnormal near 0).
double ulp(DType dtype, double v) {
  const int mantissa = dtype == DType::kBF16 ? 7 : dtype == DType::kF16 ? 10 : 23;
  const int min_exp = dtype == DType::kF16 ? -14 : -126;
  const int e = v > 0 ? std::max(static_cast<int>(std::floor(std::log2(v))), min_exp) : min_exp;
  return std::ldexp(1.0, e - mantissa);
}

// Every transpose and three (alpha, beta) pairs of an m x n x k GEMM of `in` operands into
// `out_type`, run by `gemm`, against the exact product: FP32 sums in any order are at most
// (k + 2) u32 (sum of |terms|) from it, then one rounding into the output adds half an ulp.
template <class Gemm>
void expect_within_the_fp32_bound(DType in, DType out_type, const Gemm& gemm, std::uint64_t seed) {
  const std::int64_t m = 37, n = 45, k = 130;
  for (int t = 0; t < 4; ++t) {
    const bool ta = (t & 1) != 0, tb = (t & 2) != 0;
    for (const auto& [alpha, beta] : {std::pair{1.0f, 0.0f}, std::pair{0.5f, 1.0f}, std::pair{-2.0f, 0.25f}}) {
      const Tensor a = random_tensor(ta ? Shape{k, m} : Shape{m, k}, in, seed++);
      const Tensor b = random_tensor(tb ? Shape{n, k} : Shape{k, n}, in, seed++);
      Tensor c = random_tensor({m, n}, out_type, seed++);
      const std::vector<double> c0 = to_doubles(c);
      ASSERT_TRUE(gemm(a, b, c, ta, tb, alpha, beta));
      const testing::GemmRef ref =
          reference_gemm(to_doubles(a), to_doubles(b), c0, m, n, k, ta, tb, alpha, beta);
      const std::vector<double> got = to_doubles(c);
      for (std::size_t i = 0; i < got.size(); ++i) {
        const double sums = static_cast<double>(k + 2) * std::ldexp(1.0, -24) * ref.magnitude[i];
        const double tol = sums + 0.5 * ulp(out_type, std::fabs(ref.value[i]) + sums);
        ASSERT_LE(std::fabs(got[i] - ref.value[i]), tol)
            << dtype_name(in) << " -> " << dtype_name(out_type) << " ta " << ta << " tb " << tb
            << " alpha " << alpha << " beta " << beta << " element " << i;
      }
    }
  }
}

// What oneDNN is told (transposes as strides, alpha as the output scale, beta as a sum
// post-op) checked on f32, which oneDNN runs on any x86 CPU: the 16-bit GEMMs use the same
// descriptors, so this holds where the CPU has no 16-bit units to test them on.
TEST(OnednnMatmul, TheDescriptorsTransposesAlphaAndBetaAreRightOnFp32) {
  if (!ops::onednn_built()) GTEST_SKIP() << "this build has no oneDNN";
  expect_within_the_fp32_bound(DType::kF32, DType::kF32, ops::detail::onednn_gemm, 100);
}

TEST(OnednnMatmul, SixteenBitGemmsAgreeWithTheExactProductWithinTheFp32AccumulationBound) {
  std::vector<DType> types;
  std::string skipped;
  for (const DType in : {DType::kBF16, DType::kF16}) {
    std::string why;
    if (ops::onednn_matmul_available(in, &why)) {
      types.push_back(in);
    } else {
      skipped += std::string(skipped.empty() ? "" : "; ") + std::string(dtype_name(in)) + ": " + why;
    }
  }
  if (types.empty()) GTEST_SKIP() << skipped;
  if (!skipped.empty()) std::printf("not compared: %s\n", skipped.c_str());
  const OnednnSwitch on(true);
  std::uint64_t seed = 1;
  for (const DType in : types) {
    for (const DType out_type : {DType::kF32, in}) {
      // Through ops::matmul itself: the path every layer takes.
      expect_within_the_fp32_bound(
          in, out_type,
          [](const Tensor& a, const Tensor& b, Tensor& c, bool ta, bool tb, float alpha, float beta) {
            ops::matmul(a, b, c, ta, tb, ops::Accumulation::kFP32, alpha, beta);
            return true;
          },
          seed);
      seed += 100;
    }
  }
}

// Off, no GEMM reaches oneDNN; on, exactly the 16-bit ones it is available for do.
TEST(OnednnMatmul, TheSwitchSelectsTheSoftwarePathAndOnlyAvailableSixteenBitGemmsLeaveIt) {
  const Tensor a = random_tensor({16, 24}, DType::kBF16, 11), b = random_tensor({24, 8}, DType::kBF16, 12);
  const Tensor a32 = a.to(DType::kF32), b32 = b.to(DType::kF32);
  Tensor c = Tensor::zeros({16, 8}, DType::kF32);
  {
    const OnednnSwitch off(false);
    EXPECT_FALSE(ops::onednn_matmul_enabled());
    EXPECT_FALSE(ops::detail::onednn_matmul(a, b, c, false, false, 1.0f, 0.0f));
  }
  const OnednnSwitch on(true);
  EXPECT_EQ(ops::onednn_matmul_enabled(), ops::onednn_built());
  EXPECT_EQ(ops::detail::onednn_matmul(a, b, c, false, false, 1.0f, 0.0f),
            ops::onednn_built() && ops::onednn_matmul_available(DType::kBF16));
  EXPECT_FALSE(ops::detail::onednn_matmul(a32, b32, c, false, false, 1.0f, 0.0f));  // fp32: Eigen
  EXPECT_FALSE(ops::detail::onednn_matmul(a, b32, c, false, false, 1.0f, 0.0f));   // mixed: Eigen
  // Whichever path ran, matmul's result is the product of the same numbers.
  Tensor soft = Tensor::zeros({16, 8}, DType::kF32);
  ops::matmul(a32, b32, soft);
  ops::matmul(a, b, c);
  const std::vector<double> x = to_doubles(c), y = to_doubles(soft);
  for (std::size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], y[i], 1e-4) << i;
}

// y = x w + b of `in` operands, a bias of `bias_type` and an output of `out_type`, run by
// `linear`, against the exact sum: the bias joins the FP32 sums before the one rounding, so
// the bound is that of the GEMM with |b| added to the sum of |terms| (one more FP32 addition).
template <class Linear>
void expect_linear_within_the_fp32_bound(DType in, DType bias_type, DType out_type,
                                         const Linear& linear, std::uint64_t seed) {
  const std::int64_t m = 37, n = 45, k = 130;
  const Tensor x = random_tensor({m, k}, in, seed), w = random_tensor({k, n}, in, seed + 1);
  const Tensor b = random_tensor({n}, bias_type, seed + 2, -4.0f, 4.0f);
  Tensor y = random_tensor({m, n}, out_type, seed + 3);
  ASSERT_TRUE(linear(x, w, b, y));
  const std::vector<double> zero(static_cast<std::size_t>(m * n), 0.0), bias = to_doubles(b);
  testing::GemmRef ref = reference_gemm(to_doubles(x), to_doubles(w), zero, m, n, k, false, false, 1, 0);
  const std::vector<double> got = to_doubles(y);
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double bj = bias[i % static_cast<std::size_t>(n)];
    const double value = ref.value[i] + bj, magnitude = ref.magnitude[i] + std::fabs(bj);
    const double sums = static_cast<double>(k + 2) * std::ldexp(1.0, -24) * magnitude;
    const double tol = sums + 0.5 * ulp(out_type, std::fabs(value) + sums);
    ASSERT_LE(std::fabs(got[i] - value), tol)
        << dtype_name(in) << " bias " << dtype_name(bias_type) << " -> " << dtype_name(out_type)
        << " element " << i;
  }
}

// The bias argument (linear_forward's epilogue) checked on f32, which oneDNN runs on any x86 CPU.
TEST(OnednnLinear, TheBiasArgumentIsAddedToEveryRowOnFp32) {
  if (!ops::onednn_built()) GTEST_SKIP() << "this build has no oneDNN";
  expect_linear_within_the_fp32_bound(DType::kF32, DType::kF32, DType::kF32,
                                      ops::detail::onednn_gemm_bias, 300);
}

// linear_forward of 16-bit x and w takes oneDNN's GEMM with its bias argument where oneDNN has
// a native matmul for the dtype, for an f32 or 16-bit bias and output, and agrees with the exact
// x w + b within the bound; elsewhere it says why and skips.
TEST(OnednnLinear, SixteenBitLinearForwardTakesTheBiasEpilogueAndAgreesWithTheExactSum) {
  std::vector<DType> types;
  std::string skipped;
  for (const DType in : {DType::kBF16, DType::kF16}) {
    std::string why;
    if (ops::onednn_matmul_available(in, &why)) types.push_back(in);
    else skipped += std::string(skipped.empty() ? "" : "; ") + std::string(dtype_name(in)) + ": " + why;
  }
  if (types.empty()) GTEST_SKIP() << skipped;
  if (!skipped.empty()) std::printf("not compared: %s\n", skipped.c_str());
  const OnednnSwitch on(true);
  std::uint64_t seed = 400;
  for (const DType in : types) {
    for (const DType bias_type : {DType::kF32, in}) {
      for (const DType out_type : {DType::kF32, in}) {
        // The path is taken (not the software fallback)...
        expect_linear_within_the_fp32_bound(in, bias_type, out_type, ops::detail::onednn_linear, seed);
        // ...and ops::linear_forward, the call every layer makes, gives the same bound.
        expect_linear_within_the_fp32_bound(
            in, bias_type, out_type,
            [](const Tensor& x, const Tensor& w, const Tensor& b, Tensor& y) {
              ops::linear_forward(x, w, &b, y);
              return true;
            },
            seed + 10);
        seed += 20;
      }
    }
  }
  // Off, linear_forward stays on the software path.
  const OnednnSwitch off(false);
  const Tensor x = random_tensor({8, 16}, types[0], 1), w = random_tensor({16, 8}, types[0], 2);
  const Tensor b = random_tensor({8}, DType::kF32, 3);
  Tensor y = Tensor::zeros({8, 8}, types[0]);
  EXPECT_FALSE(ops::detail::onednn_linear(x, w, b, y));
}

// Where oneDNN cannot, the reason is one sentence naming the dtype or the build.
TEST(OnednnMatmul, AnUnavailablePathSaysWhy) {
  for (const DType in : {DType::kBF16, DType::kF16}) {
    std::string why;
    if (ops::onednn_matmul_available(in, &why)) continue;
    EXPECT_FALSE(why.empty());
    EXPECT_TRUE(why.find(dtype_name(in)) != std::string::npos ||
                why.find("no oneDNN") != std::string::npos)
        << why;
  }
  std::string why;
  EXPECT_FALSE(ops::onednn_matmul_available(DType::kF32, &why));  // f32 stays on Eigen
  EXPECT_FALSE(why.empty());
}

}  // namespace
}  // namespace mixpar
