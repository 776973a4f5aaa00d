// The FP8 GEMM's host-side rules (common/cuda/fp8_gemm_args.h), on any machine: the row-major
// K-major product maps onto cuBLASLt's TN call (operands swapped, first transposed, every
// leading dimension K, D's N), every cuBLASLt FP8 restriction is refused with a message naming
// it, and the device rule is compute capability 8.9 or later.
#include <gtest/gtest.h>

#include <cstdint>
#include <stdexcept>
#include <initializer_list>
#include <string>
#include <utility>

#include "cuda/fp8_gemm_args.h"

namespace mixpar::cuda {
namespace {

// The message of the std::invalid_argument `f` throws ("" if none).
template <class F>
std::string refusal(F&& f) {
  try {
    f();
  } catch (const std::invalid_argument& e) {
    return e.what();
  }
  return "";
}

TEST(CudaFp8Args, TheRowMajorKMajorProductIsCuBlasLtsTnCall) {
  Fp8GemmShape s;
  s.M = 32;
  s.N = 48;
  s.K = 128;
  s.a_format = DType::kE5M2;  // a gradient ...
  s.b_format = DType::kE4M3;  // ... times a weight
  s.out_type = DType::kBF16;
  const Fp8LtArgs a = fp8_lt_args(s);
  // Column-major D [N, M] is the row-major out [M, N]: m and n swap, k stays.
  EXPECT_EQ(a.m, 48);
  EXPECT_EQ(a.n, 32);
  EXPECT_EQ(a.k, 128);
  // cuBLASLt's A is our b (stored [K, N] column-major, transposed by TRANSA = T), its B our a.
  EXPECT_EQ(a.first_format, DType::kE4M3);
  EXPECT_EQ(a.second_format, DType::kE5M2);
  EXPECT_EQ(a.first_rows, 128);
  EXPECT_EQ(a.first_cols, 48);
  EXPECT_EQ(a.second_rows, 128);
  EXPECT_EQ(a.second_cols, 32);
  EXPECT_EQ(a.ld_first, 128);
  EXPECT_EQ(a.ld_second, 128);
  EXPECT_EQ(a.ld_out, 48);
}

TEST(CudaFp8Args, RefusesWhatCuBlasLtsFp8KernelsCannotRun) {
  const Fp8GemmShape ok{16, 16, 16, DType::kE4M3, DType::kE4M3, DType::kF32};
  EXPECT_NO_THROW(fp8_lt_args(ok));
  const std::initializer_list<std::pair<char, std::int64_t>> bad = {
      {'M', 24}, {'N', 8}, {'K', 40}, {'K', 0}, {'M', -16}};
  for (auto [field, value] : bad) {
    Fp8GemmShape s = ok;
    (field == 'M' ? s.M : field == 'N' ? s.N : s.K) = value;
    const std::string why = refusal([&] { fp8_lt_args(s); });
    EXPECT_NE(why.find(std::string(1, field) + " = " + std::to_string(value)), std::string::npos)
        << why;
    EXPECT_NE(why.find("multiple of 16"), std::string::npos) << why;
  }
  Fp8GemmShape both_e5m2 = ok;
  both_e5m2.a_format = both_e5m2.b_format = DType::kE5M2;
  EXPECT_NE(refusal([&] { fp8_lt_args(both_e5m2); }).find("e5m2 x e5m2"), std::string::npos);
  Fp8GemmShape bf16_operand = ok;
  bf16_operand.b_format = DType::kBF16;
  EXPECT_NE(refusal([&] { fp8_lt_args(bf16_operand); }).find("e4m3 or e5m2"), std::string::npos);
  for (DType out : {DType::kF16, DType::kE4M3, DType::kF64}) {
    Fp8GemmShape s = ok;
    s.out_type = out;
    EXPECT_NE(refusal([&] { fp8_lt_args(s); }).find("output must be f32 or bf16"),
              std::string::npos);
  }
  for (DType out : {DType::kF32, DType::kBF16}) {
    Fp8GemmShape s = ok;
    s.out_type = out;
    EXPECT_NO_THROW(fp8_lt_args(s));
  }
}

TEST(CudaFp8Args, PointersMustBeSixteenByteAligned) {
  alignas(16) static unsigned char buf[64];
  EXPECT_NO_THROW(check_fp8_alignment(buf, "a"));
  EXPECT_NO_THROW(check_fp8_alignment(buf + 32, "a"));
  EXPECT_NE(refusal([&] { check_fp8_alignment(buf + 8, "b"); }).find("b is not 16-byte aligned"),
            std::string::npos);
  EXPECT_NE(refusal([&] { check_fp8_alignment(nullptr, "out"); }).find("out is null"),
            std::string::npos);
}

TEST(CudaFp8Args, Fp8GemmsNeedComputeCapabilityEightNineOrLater) {
  EXPECT_FALSE(fp8_gemm_supported(7, 5));
  EXPECT_FALSE(fp8_gemm_supported(8, 0));  // A100: no FP8 tensor cores
  EXPECT_FALSE(fp8_gemm_supported(8, 6));
  EXPECT_TRUE(fp8_gemm_supported(8, 9));   // Ada
  EXPECT_TRUE(fp8_gemm_supported(9, 0));   // Hopper
  EXPECT_TRUE(fp8_gemm_supported(10, 0));  // Blackwell
  EXPECT_EQ(fp8_gemm_unsupported_reason(9, 0), "");
  const std::string why = fp8_gemm_unsupported_reason(8, 0);
  EXPECT_NE(why.find("sm_80"), std::string::npos) << why;
  EXPECT_NE(why.find("8.9"), std::string::npos) << why;
}

}  // namespace
}  // namespace mixpar::cuda
