// Global-norm gradient clipping with the semantics of PyTorch's clip_grad_norm_ (norm_type 2,
// error_if_nonfinite=False): total = sqrt(sum over all grads of g^2), coef = max_norm /
// (total + 1e-6) clamped to <= 1, every gradient multiplied by coef. Apply it to UNSCALED
// gradients: scaled ones measure S times the true norm, so clipping fires whenever the true
// norm exceeds max_norm / S and leaves gradients of norm max_norm / S (over-clipping).
#pragma once

#include <span>

#include "tensor/tensor.h"

namespace mixpar {

// sqrt(sum_i sum_of_squares(grads[i])), summed in FP64. Under sharding, callers add the
// per-shard sums of squares (each element counted once) and take the root themselves.
double global_grad_norm(std::span<const Tensor> grads);

// max_norm / (total_norm + 1e-6), clamped to <= 1. NaN stays NaN (as torch.clamp).
double clip_coefficient(double total_norm, double max_norm);

// Multiplies every gradient by coef in place; exactly 1 leaves them untouched (PyTorch always
// multiplies; by 1 that changes no value). The multiply of a clip whose coefficient is known.
void scale_grads(std::span<const Tensor> grads, double coef);

// Multiplies every gradient by clip_coefficient(total_norm, max_norm): the clipping half of
// clip_grad_norm, for a norm measured elsewhere (over the shards of many ranks). Returns the
// coefficient.
double clip_to_norm(std::span<const Tensor> grads, double total_norm, double max_norm);

// Multiplies every gradient by clip_coefficient(global_grad_norm(grads), max_norm) and returns
// the norm measured before clipping. A coefficient of exactly 1 leaves the grads untouched;
// a non-finite norm is not an error: the grads become NaN (inf norm: 0 * inf), as in PyTorch.
double clip_grad_norm(std::span<const Tensor> grads, double max_norm);

}  // namespace mixpar
