// Matrix multiply on 2-D CPU tensors of any mix of f32, f16 and bf16 (f64 for references):
// out = alpha * op(a) * op(b) + beta * out, op = optional transpose. Products are accumulated in
// FP32 by Eigen's GEMM and the result is rounded once into out's dtype, as tensor cores do;
// Accumulation::kFP16 instead rounds the running sum to FP16 after every multiply-add.
#pragma once

#include <cstdint>
#include <string_view>

#include "tensor/tensor.h"

namespace mixpar::ops {

enum class Accumulation : std::uint8_t {
  kFP32,  // every real GEMM: fp32 running sums (f64 operands accumulate in f64)
  kFP16,  // the lesson of ch01: the running sum itself is an fp16 number
};
std::string_view accumulation_name(Accumulation acc);  // "fp32", "fp16"

// a [M, K] (or [K, M] with trans_a), b [K, N] (or [N, K] with trans_b), out [M, N].
// beta == 0 never reads out (it may hold garbage or NaN, as in BLAS). out must not overlap
// a or b. Alpha and beta are applied in the accumulation type before the one rounding.
void matmul(const Tensor& a, const Tensor& b, Tensor& out, bool trans_a = false,
            bool trans_b = false, Accumulation acc = Accumulation::kFP32, float alpha = 1.0f,
            float beta = 0.0f);

}  // namespace mixpar::ops
