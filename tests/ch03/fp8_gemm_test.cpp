// The emulated FP8 GEMM (ch03_master_weights/fp8_gemm.h) equals, bit for bit, a reference that
// quantizes with the same scales, sums in exact integer arithmetic and rounds as the
// accumulator does: for each recipe's configuration, the hybrid E4M3 x E5M2 backward, the
// 14-bit accumulator with and without promotion, and the corner where truncation steps below
// a grid point. And the accumulators' errors against the exact result have the expected order.
#include "ch03_master_weights/fp8_gemm.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "util/errors.h"
#include "fp8_test_util.h"

namespace mixpar::fp8 {
namespace {

using test_util::normal;

void expect_bit_equal(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    ASSERT_EQ(std::bit_cast<std::uint32_t>(got[i]), std::bit_cast<std::uint32_t>(want[i]))
        << "element " << i << ": " << got[i] << " vs " << want[i];
  }
}

// Operands quantized as recipe r quantizes them: A an activation (or output gradient), B a
// weight, formats a_format x b_format.
struct Operands {
  Fp8Matrix a, b;
};

Operands quantized(Recipe r, std::int64_t m, std::int64_t n, std::int64_t k, DType a_format,
                   DType b_format, unsigned seed) {
  const std::vector<float> x = normal(std::size_t(m * k), seed);
  const std::vector<float> w = normal(std::size_t(n * k), seed + 1, 0.05f);
  if (r == Recipe::kBlockwise) {
    return {quantize_current(x, m, k, a_format, 1, 128),
            quantize_current(w, n, k, b_format, 128, 128)};
  }
  if (r == Recipe::kTensorwise) {
    return {quantize_current(x, m, k, a_format, m, k), quantize_current(w, n, k, b_format, n, k)};
  }
  // Delayed: scales from an earlier step's amax (here: of another draw), so some clamp.
  const float sa = delayed_scale(3.0f, 1.0f, a_format, 0);
  const float sb = delayed_scale(0.15f, 1.0f, b_format, 0);
  return {quantize_with_scale(x, m, k, a_format, sa), quantize_with_scale(w, n, k, b_format, sb)};
}

TEST(Fp8Gemm, EachRecipesGemmEqualsTheExactReferenceBitForBit) {
  for (Recipe r : {Recipe::kDelayed, Recipe::kTensorwise, Recipe::kBlockwise}) {
    for (std::int64_t k : {128, 384, 1000}) {
      // Forward E4M3 x E4M3 and the hybrid backward E5M2 x E4M3.
      for (DType af : {DType::kE4M3, DType::kE5M2}) {
        SCOPED_TRACE(std::string(name(r)) + " K=" + std::to_string(k) + " " +
                     std::string(dtype_name(af)));
        const Operands o = quantized(r, 5, 7, k, af, DType::kE4M3, unsigned(k));
        expect_bit_equal(gemm(o.a, o.b, recipe_gemm(r)),
                         gemm_reference(o.a, o.b, recipe_gemm(r)));
      }
    }
  }
}

TEST(Fp8Gemm, FourteenBitAccumulatorEqualsReferenceWithAndWithoutPromotion) {
  const Operands o = quantized(Recipe::kTensorwise, 4, 6, 4096, DType::kE4M3, DType::kE4M3, 9);
  for (std::int64_t every : {0, 32, 128, 1000}) {
    const GemmConfig c{Accumulator::kTensorCore14, every};
    expect_bit_equal(gemm(o.a, o.b, c), gemm_reference(o.a, o.b, c));
  }
  const GemmConfig fp32{Accumulator::kFp32, 128};
  expect_bit_equal(gemm(o.a, o.b, fp32), gemm_reference(o.a, o.b, fp32));
}

TEST(Fp8Gemm, TruncationJustBelowAGridPointStepsDown) {
  // 4096 products 2^8 x 2^15 (row 0) or 1.5 * 2^8 x 2^15 (row 1) sum exactly to 2^35 and
  // 3 * 2^34, both on the 14-bit grid; then one product of the smallest subnormals with the
  // opposite sign (-2^-25): the exact sum lies just inside the grid point, so truncation
  // toward zero lands one grid step lower -- half a step at the bottom of a binade (row 0).
  // The sums are beyond double's 53 bits, which the TwoSum in gemm() must see.
  const std::int64_t k = 4097;
  std::vector<float> x(2 * k, 256.0f), w(k, 32768.0f);
  for (std::int64_t i = k; i < 2 * k; ++i) x[std::size_t(i)] = 384.0f;
  x[k - 1] = x[2 * k - 1] = -std::ldexp(1.0f, -9);
  w[k - 1] = std::ldexp(1.0f, -16);
  const Fp8Matrix a = quantize_with_scale(x, 2, k, DType::kE4M3, 1.0f);
  const Fp8Matrix b = quantize_with_scale(w, 1, k, DType::kE5M2, 1.0f);
  const GemmConfig c{Accumulator::kTensorCore14, 0};
  const std::vector<float> got = gemm(a, b, c);
  expect_bit_equal(got, gemm_reference(a, b, c));
  EXPECT_EQ(double(got[0]), std::ldexp(1.0, 35) - std::ldexp(1.0, 35 - 14));
  EXPECT_EQ(double(got[1]), 3 * std::ldexp(1.0, 34) - std::ldexp(1.0, 35 - 13));
}

TEST(Fp8Gemm, Fp32AccumulatorIsASequentialFloatSum) {
  const Operands o = quantized(Recipe::kTensorwise, 3, 3, 300, DType::kE4M3, DType::kE4M3, 11);
  const std::vector<float> c = gemm(o.a, o.b, recipe_gemm(Recipe::kTensorwise));
  for (std::int64_t m = 0; m < 3; ++m) {
    for (std::int64_t n = 0; n < 3; ++n) {
      float s = 0;
      for (std::int64_t k = 0; k < 300; ++k) {
        const float p = (o.a.value(m, k) / o.a.scale_inv[0]) * (o.b.value(n, k) / o.b.scale_inv[0]);
        s += p;
      }
      EXPECT_EQ(c[std::size_t(m * 3 + n)], s * (o.a.scale_inv[0] * o.b.scale_inv[0]));
    }
  }
}

TEST(Fp8Gemm, ErrorsAgainstTheExactResultHaveTheExpectedOrder) {
  // K = 4096: FP32 accumulation is ~1e-6 off, the 14-bit accumulator promoted every 128 a few
  // 1e-4, and without promotion far more (the accumulation lesson measures it).
  const Operands o = quantized(Recipe::kTensorwise, 4, 8, 4096, DType::kE4M3, DType::kE4M3, 21);
  const std::vector<double> exact = gemm_exact(o.a, o.b);
  const auto max_rel = [&](const GemmConfig& c) {
    const std::vector<float> got = gemm(o.a, o.b, c);
    double norm = 0, err = 0;
    for (std::size_t i = 0; i < got.size(); ++i) {
      norm = std::max(norm, std::fabs(exact[i]));
      err = std::max(err, std::fabs(double(got[i]) - exact[i]));
    }
    return err / norm;
  };
  const double fp32 = max_rel({Accumulator::kFp32, 0});
  const double promoted = max_rel({Accumulator::kTensorCore14, 128});
  const double unpromoted = max_rel({Accumulator::kTensorCore14, 0});
  EXPECT_LT(fp32, 1e-5);
  EXPECT_LT(promoted, 1e-3);
  EXPECT_GT(unpromoted, 4 * promoted);
}

TEST(Fp8Gemm, TiledOperandsNeedPromotionAlignedWithTheirTiles) {
  const Operands o = quantized(Recipe::kBlockwise, 2, 2, 256, DType::kE4M3, DType::kE4M3, 3);
  EXPECT_THROW(gemm(o.a, o.b, {Accumulator::kTensorCore14, 0}), InputError);
  EXPECT_THROW(gemm(o.a, o.b, {Accumulator::kTensorCore14, 96}), InputError);
  EXPECT_NO_THROW(gemm(o.a, o.b, {Accumulator::kTensorCore14, 64}));
  const Operands other = quantized(Recipe::kTensorwise, 2, 2, 200, DType::kE4M3, DType::kE4M3, 3);
  EXPECT_THROW(gemm(o.a, other.b, recipe_gemm(Recipe::kTensorwise)), InputError);
}

}  // namespace
}  // namespace mixpar::fp8
