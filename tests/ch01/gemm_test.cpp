// GEMM lesson tests: FP16 accumulation loses orders of magnitude more than FP32 against an
// FP64 reference; the loops themselves are right (exact on small integers); the inputs are
// genuine FP16 values from a fixed seed.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "bit_layout.h"
#include "gemm_lesson.h"

namespace mixpar::ch01 {
namespace {

TEST(Gemm, Fp16AccumulationErrorExceedsFp32ByOrdersOfMagnitude) {
  // K as in the demo (the length of the sums is what matters), fewer rows and columns.
  const GemmLesson g = gemm_lesson(32, 32, 4096);
  EXPECT_GT(g.mean_ratio(), 100.0)
      << "fp16 " << g.fp16_acc.mean_rel << " fp32 " << g.fp32_acc.mean_rel;
  EXPECT_GT(g.fp16_acc.mean_rel, 1e-2);  // percent-level error: a stalled accumulator
  EXPECT_LT(g.fp32_acc.max_rel, 1e-4);
}

TEST(Gemm, SignedInputsShowTheSameGap) {
  const GemmLesson g = gemm_lesson(32, 32, 4096, GemmInputs::kSigned);
  EXPECT_GT(g.mean_ratio(), 10.0) << "fp16 " << g.fp16_acc.mean_rel << " fp32 "
                                  << g.fp32_acc.mean_rel;
}

TEST(Gemm, LoopsAreExactOnSmallIntegers) {
  // [2,3] x [3,2] with integers: every partial sum is exact in all three accumulators.
  const std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {7, 8, 9, 10, 11, 12};
  const std::vector<float> want = {58, 64, 139, 154};
  std::vector<float> c16(4), c32(4);
  std::vector<double> c64(4), c_abs(4);
  gemm_fp16_acc(a.data(), b.data(), c16.data(), 2, 2, 3);
  gemm_fp32_acc(a.data(), b.data(), c32.data(), 2, 2, 3);
  gemm_fp64_ref(a.data(), b.data(), c64.data(), c_abs.data(), 2, 2, 3);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(c16[i], want[i]) << "element " << i;
    EXPECT_EQ(c32[i], want[i]) << "element " << i;
    EXPECT_EQ(c64[i], want[i]) << "element " << i;
    EXPECT_EQ(c_abs[i], want[i]) << "element " << i;
  }
}

TEST(Gemm, ErrorIsRelativeToAbsoluteProducts) {
  // ref 0 from 1*1 + 1*(-1): the scale |A| x |B| = 2 keeps the error finite.
  const std::vector<float> a = {1, 1}, b = {1, -1};
  std::vector<double> ref(1), ref_abs(1);
  gemm_fp64_ref(a.data(), b.data(), ref.data(), ref_abs.data(), 1, 1, 2);
  EXPECT_EQ(ref[0], 0.0);
  EXPECT_EQ(ref_abs[0], 2.0);
  const GemmError e = gemm_error({0.5f}, ref, ref_abs);
  EXPECT_EQ(e.max_rel, 0.25);
}

TEST(Gemm, InputsAreFp16ValuesFromAFixedSeed) {
  const std::vector<float> x = random_fp16({64}, GemmInputs::kSigned, 7).to_floats();
  const std::vector<float> y = random_fp16({64}, GemmInputs::kSigned, 7).to_floats();
  EXPECT_EQ(x, y);
  bool any_negative = false;
  for (float v : x) {
    EXPECT_EQ(encode(DType::kF16, v).stored, v);  // already an FP16 value
    EXPECT_GE(v, -1.0f);
    EXPECT_LE(v, 1.0f);
    any_negative = any_negative || v < 0;
  }
  EXPECT_TRUE(any_negative);
}

}  // namespace
}  // namespace mixpar::ch01
