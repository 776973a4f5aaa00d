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

}  // namespace mixpar::ch06
