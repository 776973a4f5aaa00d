// Whole-tensor reductions the training loop watches: squared norms for clipping, the
// inf/NaN check of loss scaling, counts of zeros (underflow) and non-finite values (overflow).
// Any of f32, f16, bf16, f64; sums are accumulated in FP64 so the result does not depend on
// the tensor's size the way a naive FP32 running sum does.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tensor/tensor.h"

namespace mixpar::ops {

double sum(const Tensor& t);             // sum_i t_i
double sum_of_squares(const Tensor& t);  // sum_i t_i^2 (the squared L2 norm; inf/NaN propagate)
// sum_of_squares of each tensor, bit for bit (each still one running FP64 sum in element
// order), the tensors spread over the OpenMP threads: the global gradient norm's pass over
// every parameter, a chain of dependent FP64 additions that one core runs at one element per
// add latency, now runs one tensor per thread.
std::vector<double> sums_of_squares(std::span<const Tensor> ts);
double max_abs(const Tensor& t);         // max_i |t_i|; NaN if any element is NaN; 0 if empty
bool has_inf_or_nan(const Tensor& t);    // the found-inf check of dynamic loss scaling
std::int64_t count_zeros(const Tensor& t);      // elements equal to +0 or -0
std::int64_t count_nonfinite(const Tensor& t);  // elements that are +-inf or NaN

}  // namespace mixpar::ops
