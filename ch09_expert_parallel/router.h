// The router: logits [T, E] = x [T, C] . w_router [C, E] and their softmax, computed and kept
// in FP32 whatever the model's dtype. Why: top-k is a discontinuous decision on differences
// between logits, which are often a few units in the last place of a BF16 number (8 bits of
// significand: two logits 0.5% apart round to the same value), so a BF16 router sends tokens
// to other experts than the FP32 model it stands for, and the gates, the aux loss and the
// z-loss (which squares logsumexp) inherit its rounding. The lesson counts the flipped
// choices (moe_lesson.h); Switch Transformer sec. 2.4 ("selective precision") and DeepSeek-V3
// keep the router in FP32 for this reason (docs/SOURCES.md).
#pragma once

#include "tensor/tensor.h"

namespace mixpar::ch09 {

struct RouterOut {
  Tensor x;       // [T, C] the input rounded to FP32 (kept for the weight gradient)
  Tensor logits;  // [T, E] FP32
  Tensor probs;   // [T, E] FP32 softmax of each row
};

// x of any float dtype; w [C, E] FP32 (the router's weights are FP32 as well).
RouterOut router_forward(const Tensor& x, const Tensor& w);

// Row-wise softmax in FP32 (max subtracted, sum in column order).
void softmax_rows(const Tensor& logits, Tensor& probs);
// dlogits [T, E] = p * (dprobs - sum_j p_j dprobs_j), row by row (softmax's Jacobian).
void softmax_backward(const Tensor& probs, const Tensor& dprobs, Tensor& dlogits);

// dw [C, E] (+)= x^T dlogits; dx [T, C] FP32 = dlogits w^T (overwritten).
void router_backward(const RouterOut& r, const Tensor& w, const Tensor& dlogits, Tensor& dw,
                     Tensor& dx, bool accumulate);

}  // namespace mixpar::ch09
