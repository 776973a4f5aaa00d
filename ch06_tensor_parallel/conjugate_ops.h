// Megatron-LM's two conjugate operators (Shoeybi et al. 2019, section 3; docs/REFERENCE.md,
// Tensor parallelism), on the ranks of one tensor-parallel group:
//
//   f   forward: identity            backward: all-reduce SUM of the gradient
//   g   forward: all-reduce SUM      backward: identity
//
// f stands before a column-parallel layer: every rank reads the same whole input X, so in the
// backward each rank holds only its columns' share of dL/dX and the shares must be summed.
// g stands after a row-parallel layer: each rank's product is a partial sum over its input
// rows, so the forward sums them; the gradient of a sum is the same on every addend, so the
// backward passes it through. An MLP (column then row) has exactly one f and one g: one
// all-reduce forward, one backward.
//
// With sequence parallelism (Korthikanti et al. 2022, section 4.2.2) the activations around
// the pair are split by rows, rank r holding rows r N / tp .. of the [N, C] input and output,
// and the operators become f-bar and g-bar:
//
//   f-bar   forward: all-gather the rows      backward: reduce-scatter the gradient
//   g-bar   forward: reduce-scatter the sum   backward: all-gather the gradient's rows
//
// An all-reduce is a reduce-scatter followed by an all-gather: the same bytes, moved to the
// other side of the layers.
#pragma once

#include "comm/communicator.h"
#include "tensor/tensor.h"

namespace mixpar::ch06 {

// f: the forward is the identity (the input is already whole on every rank).
inline const Tensor& f_forward(const Tensor& x) { return x; }
// f's backward: dx (this rank's partial gradient) <- the sum over the tp group.
inline void f_backward(Communicator& tp, Tensor& dx) { tp.all_reduce(dx, ReduceOp::kSum); }
// g: y (this rank's partial product) <- the sum over the tp group.
inline void g_forward(Communicator& tp, Tensor& y) { tp.all_reduce(y, ReduceOp::kSum); }
// g's backward is the identity: every addend's gradient is the output's.
inline const Tensor& g_backward(const Tensor& dy) { return dy; }

// f-bar: full [N, C] <- every rank's rows [N / tp, C], in rank order.
inline void f_bar_forward(Communicator& tp, const Tensor& rows, Tensor& full) {
  tp.all_gather(rows, full);
}
// f-bar's backward: d_rows <- this rank's rows of the sum of every rank's partial d_full.
inline void f_bar_backward(Communicator& tp, const Tensor& d_full, Tensor& d_rows) {
  tp.reduce_scatter(d_full, d_rows, ReduceOp::kSum);
}
// g-bar: rows <- this rank's rows of the sum of every rank's partial product full.
inline void g_bar_forward(Communicator& tp, const Tensor& full, Tensor& rows) {
  tp.reduce_scatter(full, rows, ReduceOp::kSum);
}
// g-bar's backward: d_full <- every rank's rows of the output's gradient.
inline void g_bar_backward(Communicator& tp, const Tensor& d_rows, Tensor& d_full) {
  tp.all_gather(d_rows, d_full);
}

}  // namespace mixpar::ch06
