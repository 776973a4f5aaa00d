// Lesson tests: each failure mode of the formats shows its symptom (inf, zero, a swamped
// update, a stalled sum), the range table matches the reference, and the source articles'
// (docs/SOURCES.md) FP8 range and 7B memory figures are shown to be wrong by computation.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "fp_lessons.h"

namespace mixpar::ch01 {
namespace {

TEST(Ranges, TableMatchesTheReference) {
  EXPECT_EQ(info(DType::kF16).max, 65504);
  EXPECT_EQ(info(DType::kF16).min_normal, std::ldexp(1.0, -14));
  EXPECT_EQ(info(DType::kF16).min_subnormal, std::ldexp(1.0, -24));
  EXPECT_EQ(info(DType::kBF16).min_subnormal, std::ldexp(1.0, -133));
  EXPECT_EQ(info(DType::kBF16).epsilon, std::ldexp(1.0, -7));
  EXPECT_EQ(info(DType::kE4M3).min_subnormal, std::ldexp(1.0, -9));
  EXPECT_EQ(info(DType::kE5M2).min_subnormal, std::ldexp(1.0, -16));
  EXPECT_EQ(info(DType::kF32).max, static_cast<double>(std::numeric_limits<float>::max()));
}

TEST(Ranges, Bf16HasTheRangeOfFp32ButFewerDigitsThanFp16) {
  EXPECT_EQ(info(DType::kBF16).min_normal, info(DType::kF32).min_normal);
  EXPECT_GT(info(DType::kBF16).max, 3e38);
  EXPECT_GT(info(DType::kBF16).epsilon, info(DType::kF16).epsilon);
}

TEST(Overflow, SeventyThousandIsInfInFp16ButFiniteInBf16) {
  const FormatRow r = round_everywhere(70000);
  EXPECT_TRUE(std::isinf(r.at(DType::kF16).stored));
  EXPECT_EQ(r.at(DType::kBF16).stored, 70144);  // spacing 512 in [2^16, 2^17)
  EXPECT_LT(r.at(DType::kBF16).rel_error(), 0.01);
}

TEST(Overflow, Fp16OverflowStartsHalfwayAboveItsMax) {
  EXPECT_EQ(round_everywhere(65519).at(DType::kF16).stored, 65504);
  EXPECT_TRUE(std::isinf(round_everywhere(65520).at(DType::kF16).stored));
  for (const FormatRow& r : overflow_rows()) {
    EXPECT_TRUE(std::isfinite(r.at(DType::kBF16).stored)) << r.input;
  }
}

TEST(Underflow, OneEMinus8BecomesZeroInFp16ButNotBf16) {
  const FormatRow r = round_everywhere(1e-8);
  EXPECT_EQ(r.at(DType::kF16).stored, 0.0);
  EXPECT_LT(r.at(DType::kBF16).rel_error(), 0.01);
}

TEST(Underflow, SixEMinus8BecomesTheSmallestSubnormal) {
  const Encoded e = encode(DType::kF16, 6e-8);
  EXPECT_EQ(e.stored, std::ldexp(1.0, -24));
  EXPECT_EQ(e.bits, 0x0001u);
  EXPECT_EQ(decompose(DType::kF16, e.bits).value_class, ValueClass::kSubnormal);
}

TEST(Underflow, HalfTheSmallestSubnormalIsATieThatGoesToZero) {
  EXPECT_EQ(encode(DType::kF16, std::ldexp(1.0, -25)).stored, 0.0);
  EXPECT_EQ(encode(DType::kF16, 3e-8).stored, std::ldexp(1.0, -24));
  EXPECT_EQ(encode(DType::kF16, 2.98e-8).stored, 0.0);
}

TEST(Underflow, SubnormalsLoseRelativePrecision) {
  // A normal FP16 value is within eps/2 = 2^-11; a subnormal can be off by far more.
  EXPECT_LE(encode(DType::kF16, 1e-4).rel_error(), std::ldexp(1.0, -11));
  EXPECT_GT(encode(DType::kF16, 1e-7).rel_error(), 0.1);
}

TEST(Swamping, SmallUpdateVanishesInFp16AndBf16ButNotFp32) {
  const SwampingLesson s = swamping_lesson(0.5, 1e-7);
  EXPECT_EQ(s.at(DType::kF16).one_step, 0.5);
  EXPECT_EQ(s.at(DType::kBF16).one_step, 0.5);
  EXPECT_GT(s.at(DType::kF32).one_step, 0.5);
}

TEST(Swamping, RepeatedUpdatesNeverMoveA16BitWeightButMoveAnFp32Master) {
  const SwampingLesson s = swamping_lesson(0.5, 1e-7, 1e-5, 10000);
  EXPECT_EQ(s.at(DType::kF16).after_steps, 0.5);
  EXPECT_EQ(s.at(DType::kBF16).after_steps, 0.5);
  EXPECT_NEAR(s.at(DType::kF32).after_steps, s.exact_after_steps, 1e-3 * s.exact_after_steps);
}

TEST(Swamping, ThresholdIsExactlyHalfAnUlp) {
  for (DType t : {DType::kF32, DType::kF16, DType::kBF16}) {
    const double thr = vanishing_threshold(t, 0.5);
    EXPECT_EQ(add_in(t, 0.5, thr), 0.5) << format_key(t);
    // Just above the tie (with few significant bits, so the FP64 sum stays exact).
    EXPECT_GT(round_sum(t, 0.5, thr * (1 + std::ldexp(1.0, -10))), 0.5) << format_key(t);
  }
  EXPECT_EQ(vanishing_threshold(DType::kF16, 0.5), std::ldexp(1.0, -12));
}

TEST(Rounding, PiBecomes3140625InBoth16BitFormats) {
  const FormatRow r = round_everywhere(3.14159);
  EXPECT_EQ(r.at(DType::kF16).stored, 3.140625);
  EXPECT_EQ(r.at(DType::kBF16).stored, 3.140625);
  EXPECT_EQ(r.at(DType::kE4M3).stored, 3.25);
  EXPECT_EQ(r.at(DType::kE5M2).stored, 3.0);
}

TEST(Accumulation, Fp16AccumulatorStallsWhereFp32DoesNot) {
  const AccumulationLesson a = accumulation_lesson(0.1, 10000);
  const AccumulatorRun &h = a.at(DType::kF16), &f = a.at(DType::kF32);
  EXPECT_EQ(h.sum, 256);
  EXPECT_GT(h.stall_step, 0);
  EXPECT_LT(h.stall_step, 10000);
  EXPECT_LT(f.stall_step, 0);
  EXPECT_NEAR(f.sum, a.exact, 1e-4 * a.exact);
  EXPECT_GT(std::fabs(h.sum - a.exact) / a.exact, 0.5);  // three quarters of the sum lost
}

TEST(Accumulation, StallHappensAtThePredictedPowerOfTwo) {
  for (double v : {0.1, 0.01, 1.0, 3.0}) {
    const AccumulationLesson a = accumulation_lesson(v, 100000);
    for (DType t : {DType::kF16, DType::kBF16}) {
      const AccumulatorRun& r = a.at(t);
      ASSERT_GT(r.stall_step, 0) << v << " " << format_key(t);
      EXPECT_EQ(r.stall_value, r.predicted_stall) << v << " " << format_key(t);
      EXPECT_EQ(r.sum, r.predicted_stall) << v << " " << format_key(t);
    }
  }
  EXPECT_EQ(predicted_stall(DType::kBF16, encode(DType::kF16, 0.1).stored), 32);
}

TEST(Fp8, ArticleRangeOf43IsWrong) {
  const Fp8Lesson f = fp8_lesson();
  EXPECT_EQ(f.e4m3_max, 448);
  EXPECT_EQ(f.e5m2_max, 57344);
  EXPECT_NE(f.e4m3_max, f.article_claimed_max);
  EXPECT_EQ(encode(DType::kE4M3, 100).stored, 96);  // a value above "43" that fits
}

TEST(Fp8, SaturatingClampsWhereNonSaturatingGivesNaNOrInf) {
  for (const Fp8Cast& c : fp8_lesson().casts) {
    if (std::fabs(c.input) > 464) {  // beyond E4M3's max and its rounding half-gap
      EXPECT_EQ(c.e4m3_sat.stored, 448) << c.input;
      EXPECT_TRUE(std::isnan(c.e4m3_nosat.stored)) << c.input;
    }
    if (std::fabs(c.input) >= 61440) {  // from the tie between 57344 and 2^16 upward
      EXPECT_EQ(c.e5m2_sat.stored, 57344) << c.input;
      EXPECT_TRUE(std::isinf(c.e5m2_nosat.stored)) << c.input;
    }
  }
}

TEST(Memory, SevenBillionFp16ParametersAre14GbNot7) {
  const MemoryLesson m = memory_lesson(7e9);
  EXPECT_EQ(m.fp16_param_bytes, 14e9);
  EXPECT_NE(m.fp16_param_bytes, m.article_param_bytes);
}

TEST(Memory, MixedPrecisionAdamIs16BytesPerParameter112GbNot98) {
  const MemoryLesson m = memory_lesson(7e9);
  EXPECT_EQ(m.bytes_per_param, 16);
  EXPECT_EQ(m.total_bytes, 112e9);
  EXPECT_NE(m.total_bytes, m.article_total_bytes);
  ASSERT_EQ(m.components.size(), 5u);
}

}  // namespace
}  // namespace mixpar::ch01
