// Exercise (chapter 9): the Switch Transformer load-balancing loss of one rank's tokens, and
// its gradient scaled like the main loss, as chapter 9's load_balance.h and aux_loss_scale.h
// compute it. probs [T, E] row-major are the router's softmax probabilities, chosen [T, k]
// each token's k experts. With f_e = (choices of expert e) / (T k) and P_e = (sum over the
// tokens of probs[t, e]) / T:
//   - loss = coef x E x sum_e f_e P_e (1 x coef when every expert gets its share; f is not
//     differentiated: it counts decisions);
//   - dprobs[t, e] = seed x E x f_e / T, with the seed the rule of aux_loss_scale.h:
//     seed = coef x loss_scale / micro_batches (the aux loss is a term of the loss: it is
//     scaled and divided over the accumulated micro-batches like the main loss).
// See ch09_expert_parallel/README.md (sections 4 and 5).
#pragma once

#include <vector>

namespace mixpar::exercises {

struct AuxLossResult {
  double loss = 0;
  std::vector<float> dprobs;  // [T, E]
};

AuxLossResult switch_aux_loss(const std::vector<float>& probs, const std::vector<int>& chosen,
                              int n_experts, int k, double coef, float loss_scale,
                              int micro_batches);

}  // namespace mixpar::exercises
