// gemm_lesson: C = A x B on FP16 inputs, accumulated three ways (FP16, FP32, and an FP64
// reference), to measure what the accumulator's precision costs. The loops are this lesson's
// own (simple row-blocked triple loops, threads over row blocks), not common/ops: each C
// element is summed over k in order, so the result is deterministic for any thread count.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace mixpar::ch01 {

enum class GemmInputs { kPositive, kSigned };  // uniform in [0, 1) or in [-1, 1)

// A tensor of `shape` with FP16 elements drawn uniformly from a fixed-seed generator.
Tensor random_fp16(const Shape& shape, GemmInputs inputs, std::uint64_t seed);

// All three take A [m, k] and B [k, n] row-major (FP16 values held as float) and write
// C [m, n]. FP16 accumulation rounds after every multiply-add (the product is exact in FP32;
// the FP32 sum is then rounded to FP16). FP32 accumulation is a plain float loop. The FP64
// reference also returns |A| x |B| (the scale the classic error bound is stated in).
void gemm_fp16_acc(const float* a, const float* b, float* c, int m, int n, int k);
void gemm_fp32_acc(const float* a, const float* b, float* c, int m, int n, int k);
void gemm_fp64_ref(const float* a, const float* b, double* c, double* c_abs, int m, int n, int k);

// Error of one GEMM against the reference. Element error: |c - ref| / (|A| x |B|), which
// is |c - ref| / |ref| for positive inputs and stays meaningful where ref is near 0.
struct GemmError {
  double max_rel;
  double mean_rel;
};
GemmError gemm_error(const std::vector<float>& c, const std::vector<double>& ref,
                     const std::vector<double>& ref_abs);

struct GemmLesson {
  int m, n, k;
  GemmInputs inputs;
  GemmError fp16_acc;
  GemmError fp32_acc;
  double mean_ratio() const { return fp16_acc.mean_rel / fp32_acc.mean_rel; }
};
GemmLesson gemm_lesson(int m, int n, int k, GemmInputs inputs = GemmInputs::kPositive,
                       std::uint64_t seed = 2024);

}  // namespace mixpar::ch01
