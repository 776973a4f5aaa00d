// A column-parallel linear layer (Megatron-LM): W [in, out] split by output columns, rank r
// holding W_r = W[:, r out/tp : (r+1) out/tp] and its slice of the bias. Y = X W is
// [X W_0 | X W_1 | ...]: each rank computes its own output columns from the whole input, with
// no communication forward (f is the identity) and one all-reduce of dX backward (f's).
#pragma once

#include "comm/communicator.h"
#include "tensor/tensor.h"

namespace mixpar::ch06 {

struct ColumnParallelLinear {
  Tensor w, b;    // [in, out / tp], [out / tp]: this rank's columns
  Tensor dw, db;  // their gradients

  // y [N, out / tp] = f(x) w + b, x [N, in] whole on every rank.
  void forward(const Tensor& x, Tensor& y) const;
  // dy [N, out / tp] -> dw, db (overwritten); dx [N, in] = f's backward of this rank's
  // dy w^T: the all-reduce SUM over tp. dx may be null (no input gradient wanted).
  void backward(Communicator& tp, const Tensor& x, const Tensor& dy, Tensor* dx);
};

// Rank r's column block of a full [in, out] weight (or [out] bias), in the same layout.
Tensor column_block(const Tensor& full, int rank, int size);

}  // namespace mixpar::ch06
