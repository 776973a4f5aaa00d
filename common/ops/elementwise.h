// In-place and binary elementwise arithmetic: scale (unscaling gradients, clipping), axpy
// (accumulating), add. Any of f32, f16, bf16 (f64 for references), mixed freely; computed in
// FP32 (f64 in reference mode) and rounded once into the output's dtype.
#pragma once

#include "tensor/tensor.h"

namespace mixpar::ops {

// x <- s * x. s is rounded to float first unless x is f64 (as a PyTorch fp32 mul_ does).
void scale(Tensor& x, double s);

// y <- y + alpha * x   (x and y: same number of elements; x may be y)
void axpy(double alpha, const Tensor& x, Tensor& y);

// out <- a + b   (same number of elements; out may be a or b)
void add(const Tensor& a, const Tensor& b, Tensor& out);

}  // namespace mixpar::ops
