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
  Tensor x;           // [N, C] the permuted input rows
  Tensor h_pre, h;    // [N, H] c_fc output and its GELU
};

// yp [N, C] = each row's expert's MLP; offsets [El + 1] over the rows of x.
void experts_forward(const ExpertWeights& w, const Tensor& x, std::span<const std::int64_t> offsets,
                     ExpertActs& acts, Tensor& yp);
// dxp [N, C] from dyp; g (+)= the weight gradients.
void experts_backward(const ExpertWeights& w, ExpertWeights& g, const ExpertActs& acts,
                      const Tensor& dyp, std::span<const std::int64_t> offsets, Tensor& dxp,
                      bool accumulate);

}  // namespace mixpar::ch09
