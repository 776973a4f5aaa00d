// The MoE layer: router (FP32) -> top-k -> capacity -> permutation -> dispatch over the ep
// group -> experts (one grouped GEMM per linear layer) -> return -> combine, and its backward
// to the router's weights, the experts' weights and the input. It replaces a block's MLP: its
// output is the MLP branch, to which the block adds the residual, so a token whose every
// choice was dropped leaves the layer as zeros and passes through on the residual.
//
// Everything the layer computes is FP32 (the experts on the FMA path of common/ops); x may be
// of any float dtype and is rounded to FP32 once. With MoeConfig::dtype bf16 or f16 the
// experts compute in that dtype, as the dense MLP of a 16-bit run (experts.h), while the
// router, the gates, the balance statistics and the rows' travel stay FP32.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "ch09_expert_parallel/experts.h"
#include "ch09_expert_parallel/expert_dispatch.h"
#include "ch09_expert_parallel/moe_config.h"
#include "ch09_expert_parallel/permutation.h"
#include "ch09_expert_parallel/router.h"
#include "ch09_expert_parallel/load_balance.h"
#include "comm/communicator.h"

namespace mixpar::ch09 {

struct MoeParallel {
  Communicator* ep = nullptr;       // the expert-parallel group; null: every expert here
  Communicator* balance = nullptr;  // the ranks whose tokens the balance statistics cover
  DispatchKind dispatch = DispatchKind::kAllToAll;
};

// What the last forward measured on this rank.
struct MoeStats {
  BalanceStats balance;                    // reduced over MoeParallel::balance
  std::vector<double> local_counts;        // [E] this rank's choices alone (before drops)
  std::vector<std::int64_t> kept;          // [E] this rank's kept assignments per expert
  std::int64_t assignments = 0;            // T k of this rank
  std::int64_t dropped = 0;                // of them, over capacity
  std::int64_t expert_rows = 0;            // rows this rank's experts ran
  double aux_loss = 0, z_loss = 0;         // without their coefficients
};

// Seeds of the auxiliary terms' gradients (aux_loss_scale.h gives them).
struct MoeBackwardOptions {
  float aux_seed = 0;       // aux_grad_seed(aux_loss_coef, factors)
  float z_seed = 0;         // aux_grad_seed(z_loss_coef, factors)
  bool accumulate = false;  // add into the weight gradients (micro-batches)
  double aux_tokens = 0;    // > 0: the T of the aux gradient (the local-T bug); 0: the group's
};

class MoeLayer {
 public:
  // Validates c against the ep size (InputError); the router from Philox(seed, 999), this
  // rank's experts [rank x E/ep, ...) by global index (experts.h).
  MoeLayer(const MoeConfig& c, MoeParallel par);

  const MoeConfig& config() const { return c_; }
  int ep_size() const { return par_.ep ? par_.ep->size() : 1; }
  Tensor& router_weight() { return router_w_; }       // [C, E] FP32
  Tensor& router_grad() { return router_g_; }
  ExpertWeights& experts() { return w_; }
  ExpertWeights& expert_grads() { return g_; }
  std::vector<float>& expert_bias() { return bias_; }  // [E], DeepSeek-V3's; zeros at start

  // y [T, C] FP32, the MLP branch of the tokens x [T, C]. slot: the micro-batch in flight
  // whose state this forward keeps for its backward (a pipeline runs several forwards before
  // their backwards, chapter 7); a forward into a slot whose backward has not run replaces it.
  Tensor forward(const Tensor& x, int slot = 0);
  // dx [T, C] FP32 of slot's forward, given dy [T, C] (carrying the loss's factors); the slot's
  // state is freed. std::logic_error when the slot holds no forward.
  Tensor backward(const Tensor& dy, const MoeBackwardOptions& o = {}, int slot = 0);
  // DeepSeek-V3's step on the bias from the last forward's counts, reduced over the balance
  // group; reduced = false takes this rank's own counts (the bug: the replicas' biases part).
  void update_bias(bool reduced = true);

  const MoeStats& stats() const { return stats_; }  // of the last forward
  // Forwards whose backward has not run yet (their states held).
  std::size_t slots_in_flight() const { return states_.size(); }

 private:
  MoeConfig c_;
  MoeParallel par_;
  Tensor router_w_, router_g_;
  ExpertWeights w_, g_;
  std::vector<float> bias_;
  // What one forward keeps for its backward.
  struct Saved {
    RouterOut router;
    Routing routing;
    std::vector<char> keep;
    Permutation perm;
    AllToAllPlan a2a;
    AllGatherPlan ag;
    ExpertActs acts;
    Tensor yp;  // [N, C] the experts' outputs at the tokens' rank (all-to-all, ep 1)
    Tensor ye;  // [Ne, C] the experts' outputs where they ran
    BalanceStats balance;  // the aux and z-loss gradients' statistics
  };
  std::map<int, Saved> states_;  // by slot, from its forward to its backward
  MoeStats stats_;               // the last forward's
};

// The gradient sums of data parallelism for the layer: the router's over `dense` (dp x cp),
// the experts' over `expert_dp` (the ranks holding the same experts). Null: no sum.
void sync_moe_grads(MoeLayer& layer, Communicator* dense, Communicator* expert_dp);

}  // namespace mixpar::ch09
