// Pointwise activations and their backward passes: ReLU and GELU in the tanh form of GPT-2.
// Inputs and outputs may be any of f32, f16, bf16 (f64 for references) and may alias (in
// place); values are computed in FP32 (f64 in reference mode) and rounded once per output.
#pragma once

#include <cstdint>
#include <string_view>

#include "tensor/tensor.h"

namespace mixpar::ops {

enum class Activation : std::uint8_t { kRelu, kGelu };
std::string_view activation_name(Activation a);  // "relu", "gelu"

// x, y, dy, dx: any shape, the same number of elements.
// y = max(x, 0);   dx = (x > 0 ? dy : 0), the gradient at 0 being 0. As PyTorch: a NaN in x
// stays NaN in y and passes dy through, and dx is selected, not multiplied (inf * 0 never
// makes a NaN), so no NaN is hidden from or invented for the loss scaler's check.
void relu_forward(const Tensor& x, Tensor& y);
void relu_backward(const Tensor& x, const Tensor& dy, Tensor& dx);

// y = 0.5 x (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)      (docs/REFERENCE.md, GPT-2)
// dy/dx = 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
void gelu_forward(const Tensor& x, Tensor& y);
void gelu_backward(const Tensor& x, const Tensor& dy, Tensor& dx);

// Dispatch on the enum (all tensors the same number of elements, any shape).
void activation_forward(Activation a, const Tensor& x, Tensor& y);
void activation_backward(Activation a, const Tensor& x, const Tensor& dy, Tensor& dx);

}  // namespace mixpar::ops
