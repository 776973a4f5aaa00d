// What an MoE layer is made of (chapter 9): the sizes, the router's top-k and its gate
// normalisation, the capacity and its dropping policy, and the coefficients of the three
// load-balancing mechanisms, each an option (docs/SOURCES.md: Switch Transformer, GShard,
// DeepSeek-V3, Megatron-LM MoE). validate() refuses a layout that cannot run, before any work.
#pragma once

#include <cstdint>
#include <string>

#include "numerics/dtype.h"

namespace mixpar::ch09 {

// Which assignments an expert over capacity keeps (Megatron's moe_token_drop_policy):
// kProbability the ones with the highest router probability, kPosition the earliest tokens.
enum class DropPolicy : std::uint8_t { kProbability, kPosition };
std::string drop_policy_name(DropPolicy p);  // "probability", "position"

struct MoeConfig {
  std::int64_t d_model = 16;   // C
  std::int64_t d_hidden = 64;  // H of each expert's MLP (GPT-2: 4 C)
  int n_experts = 4;           // E
  int top_k = 2;               // k experts per token
  // Gates renormalised over the k chosen probabilities (Mixtral, DeepSeek-V3), or the softmax
  // probabilities themselves (Switch, GShard): with k = 1 and normalisation the gate is 1.
  bool normalize_gates = true;
  // Capacity per expert = ceil(factor x tokens x k / E) on each rank's tokens (Switch eq. 3);
  // 0: no limit, nothing dropped.
  double capacity_factor = 0;
  DropPolicy drop_policy = DropPolicy::kProbability;
  double aux_loss_coef = 0;     // Switch/GShard load-balancing loss, alpha (Switch: 1e-2)
  double z_loss_coef = 0;       // router z-loss (ST-MoE: 1e-3)
  double bias_update_rate = 0;  // DeepSeek-V3's auxiliary-loss-free bias, gamma (0: off)
  std::uint64_t seed = 1;       // Philox seed of the router and of every expert (by global index)
  // The experts' working dtype (experts.h): f32, or bf16 / f16 as the dense MLP they stand in
  // for computes in a 16-bit run. The router is FP32 whatever it is (router.h).
  DType dtype = DType::kF32;
};

// InputError, one line, for a layout that cannot run: sizes < 1, k outside [1, E], ep < 1
// or not dividing E, a negative or non-finite capacity factor or coefficient.
void validate(const MoeConfig& c, int ep = 1);

// The capacity of each expert for `tokens` tokens: -1 (no limit) with factor 0; otherwise
// ceil(factor x tokens x k / E), refused with an InputError when factor x tokens x k / E is
// under one token.
std::int64_t expert_capacity(const MoeConfig& c, std::int64_t tokens);

}  // namespace mixpar::ch09
