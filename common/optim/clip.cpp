// clip_grad_norm_: the norm from ops::sum_of_squares, the scaling from ops::scale.
#include "optim/clip.h"

#include <cmath>

#include "ops/elementwise.h"
#include "ops/reductions.h"
#include "ops/op_profile.h"

namespace mixpar {

double global_grad_norm(std::span<const Tensor> grads) {
  const ops::OpTimer timer("grad norm and clip");
  // Each tensor's sum of squares (on the threads), added in the tensors' order.
  double sum_sq = 0.0;
  for (const double s : ops::sums_of_squares(grads)) sum_sq += s;
  return std::sqrt(sum_sq);
}

double clip_coefficient(double total_norm, double max_norm) {
  // The 1e-6 keeps a zero norm from dividing by zero (torch/nn/utils/clip_grad.py).
  const double coef = max_norm / (total_norm + 1e-6);
  return coef > 1.0 ? 1.0 : coef;
}

void scale_grads(std::span<const Tensor> grads, double coef) {
  const ops::OpTimer timer("grad norm and clip");
  // PyTorch always multiplies; by exactly 1 that changes no value, so only the rest run.
  if (coef == 1.0) return;
  for (const Tensor& g : grads) {
    Tensor handle = g;  // a handle on the same storage: the grads are scaled in place
    ops::scale(handle, coef);
  }
}

double clip_to_norm(std::span<const Tensor> grads, double total_norm, double max_norm) {
  const double coef = clip_coefficient(total_norm, max_norm);
  scale_grads(grads, coef);
  return coef;
}

double clip_grad_norm(std::span<const Tensor> grads, double max_norm) {
  const double total = global_grad_norm(grads);
  clip_to_norm(grads, total, max_norm);
  return total;
}

}  // namespace mixpar
