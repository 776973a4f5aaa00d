// The experts' linear layers as one grouped GEMM: group g's rows [offsets[g], offsets[g+1])
// of x times its own weight w[g] (+ bias b[g]), every group in one call on the FP32 FMA
// kernels of common/ops/fma_gemm.h. Each output element is one FMA chain over its row and
// column, whatever the other rows are, so the grouped call gives, bit for bit, what running
// each expert alone on its rows (ops::linear_forward) gives; a group with no rows is skipped
// (its weight gradient is zero). The GPU's equivalent is a grouped GEMM over a list of
// problems (Megatron-LM's GroupedMLP); on the CPU the groups run in turn, each split over the
// threads by output blocks.
//
// 16-bit x and w (bf16, f16: the experts of a 16-bit run, experts.h) take the dense linear
// layer of that dtype group by group (common/ops/linear.h: every product accumulated in FP32,
// each output rounded once into its own dtype), so an expert computes as the dense MLP of the
// run; the weight and bias gradients may be FP32 (the optimizer's masters' own).
#pragma once

#include <cstdint>
#include <span>

#include "tensor/tensor.h"

namespace mixpar::ch09 {

// y [N, out] = per group x_g . w[g] + b[g]; x [N, in], w [G, in, out], b [G, out]: all FP32,
// or x, w, b and y of one 16-bit dtype.
void grouped_linear_forward(const Tensor& x, const Tensor& w, const Tensor& b,
                            std::span<const std::int64_t> offsets, Tensor& y);

// dx [N, in] = dy_g w[g]^T (skipped when null); dw[g] (+)= x_g^T dy_g; db[g] (+)= sum of
// dy_g's rows (ops::bias_grad). Groups with no rows: dw[g], db[g] zeroed unless accumulate.
void grouped_linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx,
                             Tensor& dw, Tensor& db, std::span<const std::int64_t> offsets,
                             bool accumulate);

}  // namespace mixpar::ch09
