// Losses with their gradients: mean-squared error (regression) and softmax cross-entropy
// (classification), both means over the batch as PyTorch's reduction='mean'. The gradient is
// multiplied by grad_scale before its one rounding into dpred's dtype: that is where loss
// scaling acts, so a scaled FP16 gradient can overflow to inf or survive underflow right here.
#pragma once

#include <cstdint>
#include <span>

#include "tensor/tensor.h"

namespace mixpar::ops {

// loss = (1 / (B N)) sum_{b,j} (pred - target)^2      pred, target [B, N] (any shape, same numel)
// dpred [B, N] = grad_scale * 2 (pred - target) / (B N)   (skipped when dpred is null)
// The loss is summed in double and returned unscaled.
double mse_loss(const Tensor& pred, const Tensor& target, Tensor* dpred = nullptr,
                float grad_scale = 1.0f);

// loss = (1 / B) sum_b [ logsumexp(logits_b) - logits_b[labels_b] ]     logits [B, V], labels [B]
// dlogits [B, V] = grad_scale * (softmax(logits_b) - onehot(labels_b)) / B
// Softmax subtracts the row max first (no overflow for any finite logits). Labels must lie in
// [0, V). The loss is summed in double and returned unscaled.
double cross_entropy_loss(const Tensor& logits, std::span<const std::int32_t> labels,
                          Tensor* dlogits = nullptr, float grad_scale = 1.0f);

}  // namespace mixpar::ops
