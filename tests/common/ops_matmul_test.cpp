// matmul against an FP64 reference in every input/output dtype combination, with transposes
// and alpha/beta; FP16 accumulation against FP32 accumulation on a long inner dimension; and
// the promise that FP32 operands are mapped, not copied.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "numerics/formats.h"
#include "ops/matmul.h"
#include "ops_test_util.h"

namespace mixpar {
namespace {

using ops::Accumulation;
using testing::random_tensor;
using testing::to_doubles;

constexpr DType kWorkDTypes[] = {DType::kF32, DType::kF16, DType::kBF16};

// The bound for one element: half an ulp of the output format at |ref| (the one rounding into
// out), plus the FP32 accumulation error of a K-term sum, 2 K 2^-24 sum|terms| (Higham's
// gamma_K with margin), plus an FP32 rounding of the widened output for beta != 0.
// eps is the output format's epsilon (format_info(out).epsilon; 2^-23 for f32).
double element_tolerance(DType out, double eps, double ref, double magnitude, std::int64_t k) {
  const double fp32_err = 2.0 * static_cast<double>(k + 2) * std::ldexp(1.0, -24) * magnitude;
  if (out == DType::kF32) return fp32_err + 1e-30;
  const double half_ulp = ref == 0 ? 0 : 0.5 * eps * std::ldexp(1.0, std::ilogb(ref));
  return half_ulp + fp32_err + 1e-30;
}

struct Case {
  DType a, b, out;
  bool ta, tb;
  float alpha, beta;
};

std::string describe(const Case& c) {
  return std::string(dtype_name(c.a)) + " x " + std::string(dtype_name(c.b)) + " -> " +
         std::string(dtype_name(c.out)) + (c.ta ? " aT" : "") + (c.tb ? " bT" : "") +
         " alpha=" + std::to_string(c.alpha) + " beta=" + std::to_string(c.beta);
}

// Runs one case and checks every element against the FP64 reference of the same inputs.
void check_case(const Case& c, std::uint64_t seed) {
  const std::int64_t m = 7, n = 5, k = 33;
  Tensor a = random_tensor(c.ta ? Shape{k, m} : Shape{m, k}, c.a, seed);
  Tensor b = random_tensor(c.tb ? Shape{n, k} : Shape{k, n}, c.b, seed + 1);
  Tensor out = random_tensor({m, n}, c.out, seed + 2);
  const std::vector<double> c0 = to_doubles(out);
  ops::matmul(a, b, out, c.ta, c.tb, Accumulation::kFP32, c.alpha, c.beta);
  const auto ref = testing::reference_gemm(to_doubles(a), to_doubles(b), c0, m, n, k, c.ta, c.tb,
                                           c.alpha, c.beta);
  const std::vector<double> got = to_doubles(out);
  const double eps = format_info(c.out).epsilon;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double tol = element_tolerance(c.out, eps, ref.value[i], ref.magnitude[i], k);
    ASSERT_NEAR(got[i], ref.value[i], tol) << describe(c) << " at element " << i;
  }
}

TEST(Matmul, EveryDtypeCombinationAndTransposeMatchesFp64Reference) {
  std::uint64_t seed = 100;
  for (DType da : kWorkDTypes)
    for (DType db : kWorkDTypes)
      for (DType dout : kWorkDTypes)
        for (int t = 0; t < 4; ++t) check_case({da, db, dout, (t & 1) != 0, (t & 2) != 0, 1.f, 0.f}, seed += 3);
}

TEST(Matmul, AlphaAndBetaApplyBeforeTheOneRounding) {
  std::uint64_t seed = 900;
  for (DType d : kWorkDTypes)
    for (DType dout : kWorkDTypes)
      for (int t = 0; t < 4; ++t) check_case({d, d, dout, (t & 1) != 0, (t & 2) != 0, -2.f, 0.5f}, seed += 3);
}

TEST(Matmul, BetaZeroNeverReadsTheOutput) {
  Tensor a = random_tensor({3, 4}, DType::kF32, 1), b = random_tensor({4, 2}, DType::kF32, 2);
  for (DType dout : kWorkDTypes) {
    Tensor out = Tensor::empty({3, 2}, dout);
    out.fill(std::nanf(""));
    ops::matmul(a, b, out);
    for (float v : out.to_floats()) EXPECT_TRUE(std::isfinite(v)) << dtype_name(dout);
  }
}

TEST(Matmul, Fp16OutputRoundsToNearestOfTheExactResult) {
  // 1 x 1 results with a known exact value: 1 + 2^-11 + 2^-13 lies above the midpoint between
  // 1 and 1 + 2^-10, so it rounds up; 1 + 2^-11 exactly is a tie that goes to even (1.0).
  Tensor a = Tensor::from_floats(std::vector<float>{1.0f, 1.0f}, {1, 2});
  Tensor up = Tensor::from_floats(std::vector<float>{1.0f, 0x1p-11f + 0x1p-13f}, {2, 1});
  Tensor tie = Tensor::from_floats(std::vector<float>{1.0f, 0x1p-11f}, {2, 1});
  Tensor out = Tensor::empty({1, 1}, DType::kF16);
  ops::matmul(a, up, out);
  EXPECT_EQ(out.item(), 1.0f + 0x1p-10f);
  ops::matmul(a, tie, out);
  EXPECT_EQ(out.item(), 1.0f);
}

TEST(Matmul, Fp16AccumulationIsFarWorseOnALongInnerDimension) {
  // 4096 products of values in [0, 1): the sum reaches ~1024 where the fp16 ulp is 1, so the
  // terms (~0.25 on average) are largely rounded away; an FP32 sum keeps ~7 digits.
  const std::int64_t m = 4, n = 4, k = 4096;
  Tensor a = random_tensor({m, k}, DType::kF16, 11, 0.0f, 1.0f);
  Tensor b = random_tensor({k, n}, DType::kF16, 12, 0.0f, 1.0f);
  Tensor out16 = Tensor::empty({m, n}, DType::kF32), out32 = Tensor::empty({m, n}, DType::kF32);
  ops::matmul(a, b, out16, false, false, Accumulation::kFP16);
  ops::matmul(a, b, out32, false, false, Accumulation::kFP32);
  const auto ref = testing::reference_gemm(to_doubles(a), to_doubles(b), {}, m, n, k, false,
                                           false, 1.0, 0.0);
  double err16 = 0, err32 = 0;
  const auto g16 = to_doubles(out16), g32 = to_doubles(out32);
  for (std::size_t i = 0; i < ref.value.size(); ++i) {
    err16 = std::max(err16, std::fabs(g16[i] - ref.value[i]) / ref.value[i]);
    err32 = std::max(err32, std::fabs(g32[i] - ref.value[i]) / ref.value[i]);
  }
  EXPECT_GT(err16, 1e-2) << "fp16 accumulation should lose whole percents here";
  EXPECT_LT(err32, 1e-5);
  EXPECT_GT(err16 / err32, 1e3) << "err16 " << err16 << " err32 " << err32;
}

TEST(Matmul, Fp16AccumulationOnShortSumsMatchesTheReferenceClosely) {
  // With few terms the fp16 running sum is still accurate to its format: the mode is a
  // faithful fp16 accumulator, not a broken one.
  Tensor a = random_tensor({3, 4}, DType::kF16, 21), b = random_tensor({4, 3}, DType::kF16, 22);
  Tensor out = Tensor::empty({3, 3}, DType::kF32);
  ops::matmul(a, b, out, false, false, Accumulation::kFP16);
  const auto ref = testing::reference_gemm(to_doubles(a), to_doubles(b), {}, 3, 3, 4, false,
                                           false, 1.0, 0.0);
  const auto got = to_doubles(out);
  for (std::size_t i = 0; i < got.size(); ++i) {
    EXPECT_NEAR(got[i], ref.value[i], 4 * 0x1p-11 * ref.magnitude[i]) << "element " << i;
  }
}

TEST(Matmul, Fp32AndBf16OperandsAreReadWithoutCopies) {
  MemoryLedger ledger;
  LedgerScope scope(ledger);
  Tensor a = random_tensor({64, 32}, DType::kF32, 1), b = random_tensor({16, 32}, DType::kF32, 2);
  Tensor out = Tensor::empty({64, 16}, DType::kF32);
  const std::int64_t before = ledger.allocations();
  ops::matmul(a, b, out, false, true, Accumulation::kFP32, 1.0f, 0.0f);
  EXPECT_EQ(ledger.allocations(), before) << "fp32 GEMM must not copy its operands";
  // A bf16 operand goes to the kernels as it is (widened while packed: fma_gemm.h); an fp16
  // one is widened once into a workspace charged as kOther.
  const std::int64_t before_bf16 = ledger.allocations();
  ops::matmul(a, b.to(DType::kBF16), out, false, true);
  EXPECT_EQ(ledger.allocations(), before_bf16 + 1) << "the bf16 tensor itself, no widened copy";
  Tensor b16 = b.to(DType::kF16);
  ledger.reset_peaks();
  const std::int64_t before16 = ledger.allocations();
  ops::matmul(a, b16, out, false, true);
  EXPECT_EQ(ledger.allocations(), before16 + 1);
  EXPECT_GE(ledger.peak(MemCategory::kOther), b.nbytes());
}

TEST(Matmul, F64TensorsAreAnExactReference) {
  Tensor a = random_tensor({5, 6}, DType::kF64, 31), b = random_tensor({6, 4}, DType::kF64, 32);
  Tensor out = Tensor::empty({5, 4}, DType::kF64);
  ops::matmul(a, b, out);
  const auto ref = testing::reference_gemm(to_doubles(a), to_doubles(b), {}, 5, 4, 6, false,
                                           false, 1.0, 0.0);
  const auto got = to_doubles(out);
  for (std::size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], ref.value[i], 1e-14);
}

TEST(Matmul, BadArgumentsAreRejectedWithTheirNames) {
  Tensor a = random_tensor({3, 4}, DType::kF32, 1), b = random_tensor({5, 2}, DType::kF32, 2);
  Tensor out = Tensor::empty({3, 2}, DType::kF32);
  EXPECT_THROW(ops::matmul(a, b, out), std::invalid_argument);  // inner 4 vs 5
  Tensor b8 = Tensor::zeros({4, 2}, DType::kE4M3);
  EXPECT_THROW(ops::matmul(a, b8, out), std::invalid_argument);  // fp8 is not a compute dtype
  Tensor sq = random_tensor({4, 4}, DType::kF32, 3);
  Tensor sq_out = sq;
  EXPECT_THROW(ops::matmul(sq, sq, sq_out), std::invalid_argument);  // out overlaps a
  try {
    Tensor wrong = Tensor::empty({2, 2}, DType::kF32);
    ops::matmul(a, random_tensor({4, 2}, DType::kF32, 4), wrong);
    FAIL() << "no error for a wrong output shape";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("'out'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace mixpar
