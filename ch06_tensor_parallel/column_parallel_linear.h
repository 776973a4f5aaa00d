// A column-parallel linear layer (Megatron-LM): W [in, out] split by output columns, rank r
// holding W_r = W[:, r out/tp : (r+1) out/tp] and its slice of the bias. Y = X W is
// [X W_0 | X W_1 | ...]: each rank computes its own output columns from the whole input, with
// no communication forward (f is the identity) and one all-reduce of dX backward (f's).
// GptModel's attn.c_attn and mlp.c_fc are this layer: each tensor-parallel block holds one
// per layer, built by the tp group (TpCollectives::column_parallel) when the model is, and
// the block calls it through common/model/block_linear.h's interface.
#pragma once

#include "model/block_linear.h"
#include "tensor/tensor.h"

namespace mixpar::ch06 {

class TpCollectives;  // the tp group: f, g and their sequence-parallel forms, counted

class ColumnParallelLinear final : public TpColumnLinear {
 public:
  // tp: the group whose f (f-bar) the layer runs; it outlives the layer. The rest: handles on
  // this rank's columns, so a layer built on the model's shards reads and writes the model's
  // storage. site: the seam this rank's local products run through (--dtype fp8: its shard
  // cast to FP8, model/block_gemms.h); null gemms: common/ops'.
  ColumnParallelLinear(TpCollectives& tp, Tensor w, Tensor b, Tensor dw, Tensor db,
                       GemmSite site = {});

  Tensor w, b;    // [in, out / tp], [out / tp]: this rank's columns
  Tensor dw, db;  // their gradients
  GemmSite site;

  // y [N, out / tp] = f(x) w + b, x [N, in] whole on every rank.
  void forward(const Tensor& x, Tensor& y) const override;
  // dy [N, out / tp] -> dw, db (overwritten, or added to when accumulate); dx [N, in] = f's
  // backward of this rank's dy w^T: the all-reduce SUM over tp. dx may be null (no input
  // gradient wanted).
  void backward(const Tensor& x, const Tensor& dy, Tensor* dx, bool accumulate = false);
  // backward() in its two halves, which a zero-bubble pipeline runs apart (chapter 7):
  // the input gradient, dx = f's backward of dy w^T ...
  void backward_input(const Tensor& dy, Tensor& dx) const override;
  // ... and the weight gradients, dw, db (+)= x^T dy, sum_rows(dy): no communication.
  void backward_weight(const Tensor& x, const Tensor& dy, bool accumulate) override;

  // Sequence parallel (README section 6): the input arrives as this rank's rows x_rows
  // [N / tp, in]; f-bar gathers every rank's rows into x_full [N, in], then y = x_full w + b.
  void forward_sp(const Tensor& x_rows, Tensor& x_full, Tensor& y) const override;
  // The rows are gathered again into x_full (dw needs every row; keeping x_full from the
  // forward would undo the memory saving), dw, db (+)= x_full^T dy, sum_rows(dy); dx_full
  // [N, in] = dy w^T, and f-bar's backward leaves this rank's rows of the sum in dx_rows.
  void backward_sp(const Tensor& x_rows, Tensor& x_full, const Tensor& dy, Tensor& dx_full,
                   Tensor& dx_rows, bool accumulate) override;

  void rebind(const Tensor& new_w, const Tensor& new_b) override;

 private:
  TpCollectives* tp_;
};

// Rank r's column block of a full [in, out] weight (or [out] bias), in the same layout.
Tensor column_block(const Tensor& full, int rank, int size);

}  // namespace mixpar::ch06
