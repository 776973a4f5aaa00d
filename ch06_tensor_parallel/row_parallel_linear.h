// A row-parallel linear layer (Megatron-LM): W [in, out] split by input rows, rank r holding
// W_r = W[r in/tp : (r+1) in/tp, :], and taking its slice X_r of the input (what a
// column-parallel layer before it produced). X W = sum_r X_r W_r: each rank's product is a
// partial sum, and g all-reduces it. The bias is whole on every rank and added once, after the
// reduction (added before it, it would be counted tp times).
#pragma once

#include "comm/communicator.h"
#include "tensor/tensor.h"

namespace mixpar::ch06 {

struct RowParallelLinear {
  Tensor w, b;    // [in / tp, out] this rank's rows, [out] the whole bias
  Tensor dw, db;  // their gradients (db the same on every rank)

  // y [N, out] = g(x_r w) + b: every rank ends with the whole output.
  void forward(Communicator& tp, const Tensor& x_r, Tensor& y) const;
  // dy [N, out] (g's backward: the same on every rank) -> dw, db; dx_r [N, in / tp] = dy w^T.
  void backward(const Tensor& x_r, const Tensor& dy, Tensor* dx_r);
};

// Rank r's row block of a full [in, out] weight.
Tensor row_block(const Tensor& full, int rank, int size);

}  // namespace mixpar::ch06
