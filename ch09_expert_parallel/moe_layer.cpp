#include "ch09_expert_parallel/moe_layer.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include "ch09_expert_parallel/capacity.h"
#include "ch09_expert_parallel/top_k.h"
#include "random/philox.h"

namespace mixpar::ch09 {
namespace {

bool distributed(const MoeParallel& p) { return p.ep != nullptr && p.ep->size() > 1; }

}  // namespace

MoeLayer::MoeLayer(const MoeConfig& c, MoeParallel par) : c_(c), par_(par) {
  const int ep = par_.ep ? par_.ep->size() : 1;
  validate(c_, ep);
  router_w_ = Tensor::empty({c_.d_model, c_.n_experts}, DType::kF32, MemCategory::kParameters);
  Philox gen(c_.seed, 999);
  fill_normal(router_w_, gen, 0.0f, static_cast<float>(1.0 / std::sqrt(double(c_.d_model))));
  router_g_ = Tensor::zeros(router_w_.shape(), DType::kF32, MemCategory::kGradients);
  const int El = c_.n_experts / ep, rank = par_.ep ? par_.ep->rank() : 0;
  w_ = init_experts(c_, rank * El, El);
  g_ = zeros_like(w_);
  bias_.assign(static_cast<std::size_t>(c_.n_experts), 0.0f);
}

Tensor MoeLayer::forward(const Tensor& x, int slot) {
  Saved& st = states_[slot];
  st = Saved{};
  const std::int64_t T = x.dim(0), C = c_.d_model;
  const int E = c_.n_experts;
  st.router = router_forward(x, router_w_);
  const bool use_bias = c_.bias_update_rate > 0;
  st.routing = select_top_k(st.router.probs, use_bias ? std::span<const float>(bias_)
                                                  : std::span<const float>(),
                          c_.top_k, c_.normalize_gates);
  st.keep = apply_capacity(st.routing, E, expert_capacity(c_, T), c_.drop_policy);
  st.perm = make_permutation(st.routing, st.keep, E);
  stats_ = {};
  stats_.balance = balance_stats(st.routing, st.router.probs, st.router.logits, par_.balance);
  stats_.aux_loss = aux_loss(stats_.balance, c_.top_k);
  stats_.z_loss = z_loss(stats_.balance);
  st.balance = stats_.balance;
  stats_.kept = st.perm.counts;
  stats_.local_counts.assign(static_cast<std::size_t>(E), 0.0);
  for (int e : st.routing.expert) stats_.local_counts[std::size_t(e)] += 1;
  stats_.assignments = T * c_.top_k;
  stats_.dropped = stats_.assignments - st.perm.rows();

  Tensor y = Tensor::empty({T, C}, DType::kF32, MemCategory::kActivations);
  Tensor xp = Tensor::empty({st.perm.rows(), C}, DType::kF32, MemCategory::kActivations);
  permute_rows(st.router.x, st.perm, xp);
  if (!distributed(par_)) {
    st.yp = Tensor::empty({st.perm.rows(), C}, DType::kF32, MemCategory::kActivations);
    experts_forward(w_, xp, st.perm.offsets, st.acts, st.yp, c_.dtype);
    st.ye = st.yp;
    unpermute_rows(st.yp, st.perm, st.routing.gate, y);
  } else if (par_.dispatch == DispatchKind::kAllToAll) {
    st.a2a = plan_all_to_all(st.perm, C, *par_.ep);
    Tensor xe = Tensor::empty({std::int64_t(st.a2a.order.size()), C}, DType::kF32,
                              MemCategory::kActivations);
    all_to_all_dispatch(xp, st.a2a, *par_.ep, xe);
    st.ye = Tensor::empty(xe.shape(), DType::kF32, MemCategory::kActivations);
    experts_forward(w_, xe, st.a2a.offsets, st.acts, st.ye, c_.dtype);
    st.yp = Tensor::empty({st.perm.rows(), C}, DType::kF32, MemCategory::kActivations);
    all_to_all_return(st.ye, st.a2a, *par_.ep, st.yp);
    unpermute_rows(st.yp, st.perm, st.routing.gate, y);
  } else {
    st.ag = plan_all_gather(st.routing, st.keep, w_.first, w_.count(), *par_.ep);
    Tensor gathered;
    Tensor xe = Tensor::empty({std::int64_t(st.ag.source.size()), C}, DType::kF32,
                              MemCategory::kActivations);
    all_gather_dispatch(st.router.x, st.ag, *par_.ep, false, gathered, xe);
    st.ye = Tensor::empty(xe.shape(), DType::kF32, MemCategory::kActivations);
    experts_forward(w_, xe, st.ag.offsets, st.acts, st.ye, c_.dtype);
    all_gather_combine(st.ye, st.ag, *par_.ep, true, y);
  }
  stats_.expert_rows = st.acts.x.dim(0);
  return y;
}

Tensor MoeLayer::backward(const Tensor& dy, const MoeBackwardOptions& o, int slot) {
  const auto it = states_.find(slot);
  if (it == states_.end()) {
    throw std::logic_error("MoeLayer::backward of slot " + std::to_string(slot) +
                           ", which holds no forward");
  }
  Saved& st = it->second;
  const std::int64_t T = dy.dim(0), C = c_.d_model;
  const int k = c_.top_k;
  std::vector<float> dgate(static_cast<std::size_t>(T * k), 0.0f);
  Tensor dx_experts = Tensor::empty({T, C}, DType::kF32, MemCategory::kOther);
  const std::int64_t Ne = st.acts.x.dim(0);
  Tensor dye = Tensor::empty({Ne, C}, DType::kF32, MemCategory::kOther);
  Tensor dxe = Tensor::empty({Ne, C}, DType::kF32, MemCategory::kOther);
  const bool ag = distributed(par_) && par_.dispatch == DispatchKind::kAllGather;
  if (!ag) {
    // d(gate) = <dy_t, y_row>; the rows' gradient is gate x dy_t.
    for (std::size_t a = 0; a < dgate.size(); ++a) {
      const std::int64_t row = st.perm.row_of[a];
      if (row < 0) continue;
      dgate[a] = row_dot(dy.data_as<float>() + std::int64_t(a / std::size_t(k)) * C,
                         st.yp.data_as<float>() + row * C, C);
    }
    Tensor dyp = Tensor::empty({st.perm.rows(), C}, DType::kF32, MemCategory::kOther);
    unpermute_backward(dy, st.perm, st.routing.gate, dyp);
    if (distributed(par_)) all_to_all_dispatch(dyp, st.a2a, *par_.ep, dye);
    else dye = dyp;
    experts_backward(w_, g_, st.acts, dye, distributed(par_) ? st.a2a.offsets : st.perm.offsets,
                     dxe, o.accumulate, c_.dtype);
    Tensor dxp = dxe;
    if (distributed(par_)) {
      dxp = Tensor::empty({st.perm.rows(), C}, DType::kF32, MemCategory::kOther);
      all_to_all_return(dxe, st.a2a, *par_.ep, dxp);
    }
    unpermute_rows(dxp, st.perm, {}, dx_experts);
  } else {
    Tensor gathered;
    all_gather_dispatch(dy, st.ag, *par_.ep, true, gathered, dye);
    dgate = all_gather_gate_grads(gathered, st.ye, st.ag, *par_.ep);
    experts_backward(w_, g_, st.acts, dye, st.ag.offsets, dxe, o.accumulate, c_.dtype);
    all_gather_combine(dxe, st.ag, *par_.ep, false, dx_experts);
  }
  // The router: gates -> probabilities (+ the aux loss) -> logits (+ the z-loss).
  Tensor dprobs = Tensor::zeros(st.router.probs.shape(), DType::kF32, MemCategory::kOther);
  gate_backward(st.routing, dgate, c_.normalize_gates, dprobs);
  if (o.aux_seed != 0) add_aux_loss_grad(st.balance, k, o.aux_seed, dprobs, o.aux_tokens);
  Tensor dlogits = Tensor::empty(dprobs.shape(), DType::kF32, MemCategory::kOther);
  softmax_backward(st.router.probs, dprobs, dlogits);
  if (o.z_seed != 0) {
    add_z_loss_grad(st.balance, st.router.logits, st.router.probs, o.z_seed, dlogits);
  }
  Tensor dx = Tensor::empty({T, C}, DType::kF32, MemCategory::kOther);
  router_backward(st.router, router_w_, dlogits, router_g_, dx, o.accumulate);
  // dx = the experts' part + the router's, in that order.
  float* d = dx.data_as<float>();
  const float* e = dx_experts.data_as<float>();
  for (std::int64_t i = 0; i < T * C; ++i) d[i] = e[i] + d[i];
  states_.erase(it);  // the micro-batch's backward ran: its slot is free
  return dx;
}

void MoeLayer::update_bias(bool reduced) {
  update_expert_bias(bias_, reduced ? stats_.balance.counts : stats_.local_counts,
                     static_cast<float>(c_.bias_update_rate));
}

void sync_moe_grads(MoeLayer& layer, Communicator* dense, Communicator* expert_dp) {
  if (dense != nullptr) dense->all_reduce(layer.router_grad());
  if (expert_dp != nullptr) {
    ExpertWeights& g = layer.expert_grads();
    for (Tensor* t : {&g.fc_w, &g.fc_b, &g.proj_w, &g.proj_b}) expert_dp->all_reduce(*t);
  }
}

}  // namespace mixpar::ch09
