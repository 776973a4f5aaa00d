// The linear layer in GPT-2's Conv1D layout, y = x W + b with W [in, out], and its backward:
// dx = dy W^T, dW = x^T dy, db = sum over rows of dy. Tensors may be f32, f16, bf16 (or f64);
// every product accumulates in FP32 and each output is rounded once into its own dtype.
#pragma once

#include "ops/matmul.h"
#include "tensor/tensor.h"

namespace mixpar::ops {

// y [B, out] = x [B, in] . w [in, out] + b [out]. b may be null (no bias). With FP32
// accumulation the bias is added before the single rounding (a cuBLASLt bias epilogue).
void linear_forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y,
                    Accumulation acc = Accumulation::kFP32);

// Given dy [B, out] and the forward's x [B, in] and w [in, out]:
//   dx [B, in] = dy . w^T           (skipped when dx is null: the first layer needs none)
//   dw [in, out] (+)= x^T . dy
//   db [out]     (+)= sum_rows(dy)   (skipped when db is null)
// accumulate = true adds into dw and db (gradient accumulation over micro-batches);
// dx is always overwritten.
void linear_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                     Tensor* db, bool accumulate = false);

// y [B, N] += b [N] on every row, in place, one rounding per element.
void bias_add(Tensor& y, const Tensor& b);

// db [N] = sum over rows of dy [B, N] (+ db when accumulate), summed in FP32 (f64 in reference
// mode): the gradient of a bias broadcast over B rows.
void bias_grad(const Tensor& dy, Tensor& db, bool accumulate = false);

}  // namespace mixpar::ops
