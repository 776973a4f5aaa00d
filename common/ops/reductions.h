// Whole-tensor reductions the training loop watches: squared norms for clipping, the
// inf/NaN check of loss scaling, counts of zeros (underflow) and non-finite values (overflow).
// Any of f32, f16, bf16, f64; sums are accumulated in FP64 so the result does not depend on
// the tensor's size the way a naive FP32 running sum does.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace mixpar::ops {

double sum(const Tensor& t);             // sum_i t_i
double sum_of_squares(const Tensor& t);  // sum_i t_i^2 (the squared L2 norm; inf/NaN propagate)
double max_abs(const Tensor& t);         // max_i |t_i|; NaN if any element is NaN; 0 if empty
bool has_inf_or_nan(const Tensor& t);    // the found-inf check of dynamic loss scaling
std::int64_t count_zeros(const Tensor& t);      // elements equal to +0 or -0
std::int64_t count_nonfinite(const Tensor& t);  // elements that are +-inf or NaN

}  // namespace mixpar::ops
