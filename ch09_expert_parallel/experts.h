// The experts: E copies of GPT-2's MLP, y = c_proj(gelu(c_fc(x))), their weights stacked
// [E, ...] so that each layer of all experts is one grouped GEMM (grouped_gemm.h). Expert e's
// weights are drawn from Philox(seed, stream 1000 + e) by its global index, so a rank holding
// experts [first, first + count) holds exactly those experts of the one-device model, and a
// checkpoint can name them by global index.
#pragma once

#include <cstdint>
#include <span>

#include "ch09_expert_parallel/moe_config.h"
#include "tensor/tensor.h"

namespace mixpar::ch09 {

struct ExpertWeights {
  Tensor fc_w, fc_b;      // [El, C, H], [El, H]
  Tensor proj_w, proj_b;  // [El, H, C], [El, C]
  int first = 0;          // global index of expert 0 of these
  int count() const { return static_cast<int>(fc_w.dim(0)); }
};

// Experts [first, first + count) of config c, FP32; biases zero unless bias_std > 0.
ExpertWeights init_experts(const MoeConfig& c, int first, int count, float bias_std = 0.02f);
// Zeros of the same shapes (gradients).
ExpertWeights zeros_like(const ExpertWeights& w, MemCategory category = MemCategory::kGradients);

// What backward reads.
struct ExpertActs {
  Tensor x;           // [N, C] the permuted input rows (in the experts' dtype)
  Tensor h_pre, h;    // [N, H] c_fc output and its GELU (in the experts' dtype)
};

// The experts in a 16-bit dtype compute as the dense MLP of a 16-bit run does (chapter 3's
// mixed precision): the weights are FP32 masters, rounded into a working copy of that dtype
// for each forward and backward; the input rows, c_fc's output, the GELU and c_proj's output
// rounded into it, every GEMM accumulating in FP32 (grouped_gemm.h). The weight gradients
// stay FP32 (Megatron's main_grad): they are the masters' own. The rows travel and combine
// in FP32, which holds every 16-bit value exactly. With dtype f32 the FMA path, as before.
//
// yp [N, C] FP32 = each row's expert's MLP; offsets [El + 1] over the rows of x (FP32).
void experts_forward(const ExpertWeights& w, const Tensor& x, std::span<const std::int64_t> offsets,
                     ExpertActs& acts, Tensor& yp, DType dtype = DType::kF32);
// dxp [N, C] FP32 from dyp (FP32); g (+)= the weight gradients (FP32).
void experts_backward(const ExpertWeights& w, ExpertWeights& g, const ExpertActs& acts,
                      const Tensor& dyp, std::span<const std::int64_t> offsets, Tensor& dxp,
                      bool accumulate, DType dtype = DType::kF32);

}  // namespace mixpar::ch09
