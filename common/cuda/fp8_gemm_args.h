// FP8 GEMMs on cuBLASLt, the host-side rules: which shapes, formats and devices cuBLASLt's FP8
// kernels accept, and how the row-major product of chapter 3 (ch03_master_weights/fp8_gemm.h:
// C [M x N] = A [M x K] . B [N x K]^T, both operands K-major) maps onto them. Plain C++ with no
// CUDA header, so the rules are unit tested on any machine (tests/common/cuda_fp8_args_test.cpp).
//
// cuBLASLt's FP8 requirements (cuBLAS documentation, cublasLtMatmul, "FP8"):
//  * the "TN" format only: its first operand transposed, its second not. Both of chapter 3's
//    operands are stored K-major, which is exactly that: read column-major, the row-major
//    B [N x K] is B^T [K x N] (transposed back by TRANSA = T) and the row-major A [M x K] is
//    A^T [K x M] (TRANSB = N); the column-major result [N x M] is the row-major C [M x N].
//  * leading dimensions multiples of 16 bytes (16 FP8 elements; here K for both operands) and
//    16-byte aligned pointers; M and N are required to be multiples of 16 as well, as
//    Transformer Engine pads FP8 GEMM shapes to them (the kernels' tile sizes).
//  * compute type CUBLAS_COMPUTE_32F with FP32 scale type; A and B E4M3 or E5M2 but not both
//    E5M2 (the gradient is E5M2, the other operand E4M3);
//  * a GPU of compute capability 8.9 (Ada) or 9.0 (Hopper) and later: FP8 tensor cores.
// Scales: cuBLASLt's A/B scale pointers are dequantization factors, D = scale_A scale_B (A B):
// they take Fp8Matrix::scale_inv, one FP32 per tensor (tensorwise and delayed recipes).
#pragma once

#include <cstdint>
#include <string>

#include "numerics/dtype.h"

namespace mixpar::cuda {

// out [M, N] (row-major, f32 or bf16) = scale_inv_a scale_inv_b (a [M, K] . b [N, K]^T),
// a and b FP8 codes stored K-major (row stride K).
struct Fp8GemmShape {
  std::int64_t M = 0, N = 0, K = 0;
  DType a_format = DType::kE4M3, b_format = DType::kE4M3;
  DType out_type = DType::kF32;
};

// The cublasLtMatmul arguments: first operand (cuBLASLt's A) = the row-major b, transposed;
// second (cuBLASLt's B) = the row-major a, not transposed; D column-major [m, n], ld m.
struct Fp8LtArgs {
  std::int64_t m = 0, n = 0, k = 0;
  std::int64_t ld_first = 0, ld_second = 0, ld_out = 0;
  DType first_format = DType::kE4M3, second_format = DType::kE4M3;
  // Stored (column-major) shapes, as cuBLASLt's matrix layouts take them.
  std::int64_t first_rows = 0, first_cols = 0, second_rows = 0, second_cols = 0;
};

inline constexpr std::int64_t kFp8Multiple = 16;  // elements = bytes for FP8 operands

// Throws std::invalid_argument naming the first rule the call breaks (sizes not positive or
// not multiples of 16, a format that is not E4M3/E5M2, two E5M2 operands, an output that is
// not f32/bf16).
Fp8LtArgs fp8_lt_args(const Fp8GemmShape& s);

// Pointers handed to an FP8 GEMM must be 16-byte aligned; throws std::invalid_argument naming
// `what` otherwise (cudaMalloc gives 256 bytes; an offset view may not).
void check_fp8_alignment(const void* p, const char* what);

// FP8 tensor cores: compute capability 8.9 or later.
bool fp8_gemm_supported(int cc_major, int cc_minor);
// "" when supported; otherwise one line naming the device's capability and what is needed.
std::string fp8_gemm_unsupported_reason(int cc_major, int cc_minor);

}  // namespace mixpar::cuda
