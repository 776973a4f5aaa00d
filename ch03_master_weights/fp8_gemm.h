// The FP8 GEMM as the hardware computes it, emulated exactly on the CPU:
// C [M x N] = A [M x K] . B [N x K]^T with A and B quantized (fp8_scaling.h), both K-major.
//
// The model (every result is defined to the bit):
//  * each product of two FP8 values is exact (at most 4 x 4 significant bits);
//  * products are summed in chunks along K: `promote_every` elements per chunk (0 = all of K
//    in one chunk). Inside a chunk the running sum is rounded after every addition by the
//    accumulator: kFp32 rounds to nearest even in FP32; kTensorCore14 keeps 14 significant
//    bits and truncates the rest toward zero, the Hopper FP8 tensor core's accumulator as
//    DeepSeek-V3 measured it (§3.3.2: "limited to retaining around 14 bits");
//  * promotion: each chunk's partial sum is added to an FP32 total on the CUDA cores. When a
//    scale changes along K (a tiled operand), the partial is first multiplied by
//    fl32(scale_inv_a * scale_inv_b) of its tiles (DeepSeek-V3 Figure 7b); with per-tensor
//    scales the total is multiplied by them once, at the end (cuBLASLt's scale_a * scale_b).
// Recipes: delayed and tensorwise run kFp32 with no promotion (cuBLASLt's FP32 accumulation);
// blockwise runs kTensorCore14 promoted every 128 elements, aligned with its 1x128 tiles.
#pragma once

#include <cstdint>
#include <vector>

#include "fp8_scaling.h"

namespace mixpar::fp8 {

enum class Accumulator { kFp32, kTensorCore14 };
inline constexpr int kTensorCoreAccumulatorBits = 14;
inline constexpr int kPromotionInterval = 128;  // DeepSeek-V3's N_C: 4 WGMMAs of K = 32

struct GemmConfig {
  Accumulator accumulator = Accumulator::kFp32;
  std::int64_t promote_every = 0;  // 0: one chunk (no promotion)
};

// The configuration a recipe's GEMMs run with (above).
GemmConfig recipe_gemm(Recipe r);

// C = A . B^T under `config`. InputError when the shapes disagree or a tiled operand's tiles
// along K are not a multiple of promote_every (a scale must not change inside a chunk).
std::vector<float> gemm(const Fp8Matrix& a, const Fp8Matrix& b, const GemmConfig& config);

// The reference: the same quantized operands, every chunk summed in exact integer arithmetic
// (fixed point in units of 2^-32, which holds any FP8 x FP8 product) and rounded by integer
// code as the accumulator rounds, then promoted and scaled as gemm() does. gemm() computes the
// chunks in floating point; the two must agree bit for bit.
std::vector<float> gemm_reference(const Fp8Matrix& a, const Fp8Matrix& b,
                                  const GemmConfig& config);

// The true result of the quantized operands, the ground truth an accumulator's error is
// measured against: each run of K under one pair of scales summed exactly, rounded to double,
// times the (exact) product of the scales; tiles summed in long double. Relative error about
// 2^-52 per tile, far below any FP8 effect.
std::vector<double> gemm_exact(const Fp8Matrix& a, const Fp8Matrix& b);

// x rounded toward zero to `bits` significant bits (x finite): the 14-bit accumulator's step.
double truncate_to_bits(double x, int bits);

}  // namespace mixpar::fp8
