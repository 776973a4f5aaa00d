// A row-parallel linear layer (Megatron-LM): W [in, out] split by input rows, rank r holding
// W_r = W[r in/tp : (r+1) in/tp, :], and taking its slice X_r of the input (what a
// column-parallel layer before it produced). X W = sum_r X_r W_r: each rank's product is a
// partial sum, and g all-reduces it. The bias is whole on every rank and added once, after the
// reduction (added before it, it would be counted tp times).
// GptModel's attn.c_proj and mlp.c_proj are this layer: each tensor-parallel block holds one
// per layer, built by the tp group (TpCollectives::row_parallel) when the model is, and the
// block calls it through common/model/block_linear.h's interface.
#pragma once

#include "model/block_linear.h"
#include "tensor/tensor.h"

namespace mixpar::ch06 {

class TpCollectives;  // the tp group: f, g and their sequence-parallel forms, counted

class RowParallelLinear final : public TpRowLinear {
 public:
  // tp: the group whose g (g-bar) the layer runs; it outlives the layer. The rest: handles on
  // this rank's rows of the weight and on the whole bias, so a layer built on the model's
  // shards reads and writes the model's storage. site: the seam this rank's local products
  // run through (--dtype fp8: its shard cast to FP8, model/block_gemms.h); null gemms:
  // common/ops'.
  RowParallelLinear(TpCollectives& tp, Tensor w, Tensor b, Tensor dw, Tensor db,
                    GemmSite site = {});

  Tensor w, b;    // [in / tp, out] this rank's rows, [out] the whole bias
  Tensor dw, db;  // their gradients (db the same on every rank)
  GemmSite site;

  // y [N, out] = g(x_r w) + b: every rank ends with the whole output.
  void forward(const Tensor& x_r, Tensor& y) const override;
  // dy [N, out] (g's backward: the same on every rank) -> dw, db (overwritten, or added to
  // when accumulate); dx_r [N, in / tp] = dy w^T. dx_r may be null.
  void backward(const Tensor& x_r, const Tensor& dy, Tensor* dx_r, bool accumulate = false);
  // backward() in its two halves, which a zero-bubble pipeline runs apart (chapter 7):
  // dx_r = g's backward (the identity) of dy, times w^T ...
  void backward_input(const Tensor& dy, Tensor& dx_r) const override;
  // ... and dw, db (+)= x_r^T dy, sum_rows(dy).
  void backward_weight(const Tensor& x_r, const Tensor& dy, bool accumulate) override;

  // Sequence parallel (README section 6): g-bar reduce-scatters the partial products, computed
  // into y_full [N, out], so each rank ends with its rows y_rows [N / tp, out] of the sum; the
  // bias is added to those rows, once.
  void forward_sp(const Tensor& x_r, Tensor& y_full, Tensor& y_rows) const override;
  // dy_rows [N / tp, out]: this rank's rows of dL/dy; g-bar's backward gathers every rank's
  // into dy_full [N, out]; dx_r = dy_full w^T, dw (+)= x_r^T dy_full. The bias now acts on the
  // rows region: db_rows = the sum over this rank's rows alone, overwritten whatever
  // accumulate, a partial sum the caller completes over tp (with the LayerNorms' gradients,
  // README section 6).
  void backward_sp(const Tensor& x_r, const Tensor& dy_rows, Tensor& dy_full, Tensor& dx_r,
                   Tensor& db_rows, bool accumulate) override;

  void rebind(const Tensor& new_w, const Tensor& new_b) override;

 private:
  TpCollectives* tp_;
};

// Rank r's row block of a full [in, out] weight.
Tensor row_block(const Tensor& full, int rank, int size);

}  // namespace mixpar::ch06
