// The parameter and gradient lists an optimizer steps: parallel vectors of tensor handles
// (sharing storage with the model or the fp32 masters), checked once for a clear error.
// Parameters: f32, or f16/bf16 for the "pure 16-bit weights" failure mode; grads: any float.
#pragma once

#include <span>
#include <vector>

#include "tensor/tensor.h"

namespace mixpar {

// Throws std::invalid_argument unless every parameter is a defined CPU tensor of f32, f16 or
// bf16 (`who` names the optimizer in the message).
void check_params(std::span<const Tensor> params, const char* who);

// Throws unless grads has one CPU float tensor per parameter with the same element count.
void check_grads(std::span<const Tensor> params, std::span<const Tensor> grads, const char* who);

// One fp32 zero tensor per parameter, same shape, charged as `category` (moments, momentum).
std::vector<Tensor> zeros_like_fp32(std::span<const Tensor> params, MemCategory category);

}  // namespace mixpar
