// Load balancing, three ways (docs/SOURCES.md):
// - Switch Transformer's auxiliary loss (eq. 4; GShard's l_aux): L_aux = alpha E sum_e f_e P_e,
//   f_e = the fraction of the T k assignments that chose expert e (before capacity drops, not
//   differentiable), P_e = the mean router probability of e over the T tokens. Uniform
//   routing gives 1; its gradient dL/dp_te = alpha E f_e / T pushes probability away from
//   loaded experts.
// - The router z-loss (ST-MoE): L_z = beta (1/T) sum_t logsumexp(logits_t)^2, which keeps the
//   logits small so the FP32 softmax stays accurate; dL/dlogit_te = beta 2 lse_t p_te / T.
// - DeepSeek-V3's auxiliary-loss-free balancing: a bias b_e added to the scores only to choose
//   experts (top_k.h), after each step b_e += gamma sign(mean load - load_e); no gradient.
// T is the number of tokens the statistics cover: with data, context or sequence parallelism
// the counts and sums are reduced over that group first, so every rank uses the same f, P and
// T, and each rank's gradient covers its own tokens with the group's T (aux_loss_scale.h).
#pragma once

#include <span>
#include <vector>

#include "ch09_expert_parallel/top_k.h"
#include "comm/communicator.h"
#include "tensor/tensor.h"

namespace mixpar::ch09 {

struct BalanceStats {
  std::vector<double> counts;     // [E] assignments chosen per expert (before drops)
  std::vector<double> prob_sums;  // [E] sum of p_te over the tokens
  double lse_sq_sum = 0;          // sum over the tokens of logsumexp(logits_t)^2
  double tokens = 0;              // T
};

// The statistics of this rank's tokens, summed over `group` (null: this rank alone), in FP64
// (counts exactly; the sums in rank order, the same on every rank).
BalanceStats balance_stats(const Routing& r, const Tensor& probs, const Tensor& logits,
                           Communicator* group);

double aux_loss(const BalanceStats& s, int k);  // L_aux / alpha
double z_loss(const BalanceStats& s);            // L_z / beta

// dprobs [T_local, E] += seed E f_e / T for every local token (seed = alpha x the loss's
// factors, aux_loss_scale.h); tokens_override > 0 uses that T instead (the bug of a local T).
void add_aux_loss_grad(const BalanceStats& s, int k, float seed, Tensor& dprobs,
                       double tokens_override = 0);
// dlogits [T_local, E] += seed 2 lse_t p_te / T.
void add_z_loss_grad(const BalanceStats& s, const Tensor& logits, const Tensor& probs, float seed,
                     Tensor& dlogits);

// DeepSeek-V3's update: b_e += rate sign(mean(counts) - counts_e). counts must be the ones
// reduced over the group whose ranks share the bias, or the replicas' biases part.
void update_expert_bias(std::vector<float>& bias, std::span<const double> counts, float rate);

}  // namespace mixpar::ch09
