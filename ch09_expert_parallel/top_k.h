// Top-k selection: each token's k experts and their gate weights. The experts are chosen by
// probability + bias, where the bias is DeepSeek-V3's auxiliary-loss-free balancing term
// (load_balance.h): it only chooses, and the gates are taken from the probabilities alone,
// so the bias never enters the output or a gradient. Gates are the chosen probabilities,
// renormalised over the k when MoeConfig::normalize_gates (moe_config.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tensor/tensor.h"

namespace mixpar::ch09 {

// Assignment a = t k + j is token t's j-th choice (j = 0 the highest score).
struct Routing {
  std::int64_t tokens = 0;
  int k = 0;
  std::vector<int> expert;   // [T k] global expert index
  std::vector<float> prob;   // [T k] its router probability
  std::vector<float> gate;   // [T k] its weight in the combine
  std::vector<float> denom;  // [T] sum of the chosen probabilities (normalised gates), else 1
};

// probs [T, E] FP32; bias empty or [E]. Ties go to the lower expert index.
Routing select_top_k(const Tensor& probs, std::span<const float> bias, int k, bool normalize);

// The gates' backward: dprobs [T, E] += d(gate) / d(probs) applied to dgate [T k]. Normalised:
// g_j = p_j / S, so dp_i = (dg_i - sum_j dg_j g_j) / S; otherwise dp_i = dg_i.
void gate_backward(const Routing& r, std::span<const float> dgate, bool normalize,
                   Tensor& dprobs);

}  // namespace mixpar::ch09
