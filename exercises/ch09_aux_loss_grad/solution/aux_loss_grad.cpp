#include "ch09_aux_loss_grad/aux_loss_grad.h"

namespace mixpar::exercises {

AuxLossResult switch_aux_loss(const std::vector<float>& probs, const std::vector<int>& chosen,
                              int n_experts, int k, double coef, float loss_scale,
                              int micro_batches) {
  const std::size_t E = static_cast<std::size_t>(n_experts);
  const std::size_t T = probs.size() / E;
  std::vector<double> f(E, 0.0), P(E, 0.0);
  for (int e : chosen) f[static_cast<std::size_t>(e)] += 1.0 / (double(T) * k);
  for (std::size_t t = 0; t < T; ++t) {
    for (std::size_t e = 0; e < E; ++e) P[e] += probs[t * E + e] / double(T);
  }
  AuxLossResult r;
  for (std::size_t e = 0; e < E; ++e) r.loss += f[e] * P[e];
  r.loss *= coef * double(E);
  const double seed = coef * double(loss_scale) / micro_batches;
  r.dprobs.resize(probs.size());
  for (std::size_t t = 0; t < T; ++t) {
    for (std::size_t e = 0; e < E; ++e) r.dprobs[t * E + e] = float(seed * double(E) * f[e] / double(T));
  }
  return r;
}

}  // namespace mixpar::exercises
