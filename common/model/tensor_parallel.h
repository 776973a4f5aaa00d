// What a tensor-parallel GptModel asks of its tp group (Megatron-LM, Shoeybi et al. 2019;
// docs/REFERENCE.md, Tensor parallelism and activation memory), as an interface: the model
// names the layer and the place in it, chapter 6 (ch06_tensor_parallel/tp_collectives.h)
// implements each over the grid's tp communicator. The model never includes a chapter; a model
// with tp = 1 has no TensorParallelOps and calls none of them.
//
// A block's four linear layers are chapter 6's split layers, run through the interface:
//   column-parallel (attn.c_attn, mlp.c_fc)   ColumnParallelLinear: f before it, identity
//                                             forward, all-reduce SUM of the input's gradient
//                                             backward
//   row-parallel (attn.c_proj, mlp.c_proj)    RowParallelLinear: g after it, all-reduce SUM of
//                                             the partial products forward, identity
//                                             backward; the whole bias added once, after g
// and around the vocabulary-parallel embedding and loss:
//   embedding_sum   the partial embeddings (off-shard tokens give zero rows): all-reduce SUM
//   loss_max        each row's local maximum logit: all-reduce MAX
//   loss_sum        each row's target logit, then its sum of exponentials: all-reduce SUM
//   head_backward   the LM head's input gradient (the head is column-parallel over the
//                   vocabulary: its f): all-reduce SUM
// Every call is collective over the tp group, in the same order on every rank.
//
// Sequence parallel (Korthikanti et al. 2022, section 4.2.2; GptOptions::sequence_parallel):
// the LayerNorm and residual regions hold this rank's N / tp rows of the [N = B T, C]
// activations. f becomes f-bar, an all-gather of those rows before each column-parallel layer
// (reduce-scatter of the gradient backward), g becomes g-bar, a reduce-scatter after each
// row-parallel layer (all-gather of the gradient backward): the *_sp layer calls. The
// gradients of the parameters those regions use (LayerNorms, row-parallel biases) are partial
// sums over the rows, summed over tp; the embedding and the head move rows themselves:
//   all_gather_rows      part [N / tp, C] of every rank -> full [N, C], rank r's rows r N / tp..
//   reduce_scatter_rows  full [N, C] partial sums -> this rank's rows of their sum
//   sum_replicated_grads the tp replicas' partial gradients -> their sum (all-reduce SUM)
// region names the place for the traffic record ("embedding", "head forward", ...).
#pragma once

#include <cstdint>
#include <span>

#include "model/block_gemms.h"
#include "model/layers.h"
#include "tensor/tensor.h"

namespace mixpar {

// One split linear layer of a block on this rank, as handles on the registry's tensors: its
// shard of the weight (Conv1D layout [in, out]) and of the bias, and their gradients.
// Column-parallel: w [in, out / tp], b [out / tp]; row-parallel: w [in / tp, out] and the
// whole bias b [out], replicated on every tp rank. site: the GEMM seam the shard's local
// products run through (--dtype fp8: each rank casts its own shard and input; the seam's
// scales are those of the whole tensors, ch03_master_weights/fp8_linear.h).
struct LinearShard {
  Tensor w, b;
  Tensor dw, db;
  GemmSite site{};
};

class TensorParallelOps {
 public:
  virtual ~TensorParallelOps() = default;
  virtual int rank() const = 0;  // in the tp group
  virtual int size() const = 0;

  // ---- The block's split linear layers; every x, y, dx, dy is 2-D [rows, features].
  // Column-parallel: y [N, out / tp] = f(x) w + b, x [N, in] whole on every rank.
  virtual void column_parallel_forward(const LinearShard& layer, const Tensor& x, Tensor& y) = 0;
  // The backward in two halves, B then W (chapter 7's zero-bubble schedule runs them apart):
  // dx [N, in] = f's backward of dy w^T (the sum over tp of each rank's share) ...
  virtual void column_parallel_backward_input(const LinearShard& layer, const Tensor& dy,
                                              Tensor& dx) = 0;
  // ... and dw, db (+)= x^T dy, sum_rows(dy): this rank's columns, no communication.
  virtual void column_parallel_backward_weight(LinearShard& layer, const Tensor& x,
                                               const Tensor& dy, bool accumulate) = 0;
  // Row-parallel: y [N, out] = g(x w) + b, x [N, in / tp] this rank's slice of the features.
  virtual void row_parallel_forward(const LinearShard& layer, const Tensor& x, Tensor& y) = 0;
  // dx [N, in / tp] = g's backward (identity) of dy, times w^T ...
  virtual void row_parallel_backward_input(const LinearShard& layer, const Tensor& dy,
                                           Tensor& dx) = 0;
  // ... and dw, db (+)= x^T dy, sum_rows(dy) (db the same on every rank).
  virtual void row_parallel_backward_weight(LinearShard& layer, const Tensor& x,
                                            const Tensor& dy, bool accumulate) = 0;

  // ---- The same layers with sequence parallelism (f-bar, g-bar); x_full, y_full, dx_full
  // and dy_full are [N, C] scratch of the caller's.
  // y [N, out / tp] = f-bar(x_rows) w + b: this rank's rows [N / tp, in] gathered into x_full.
  virtual void column_parallel_forward_sp(const LinearShard& layer, const Tensor& x_rows,
                                          Tensor& x_full, Tensor& y) = 0;
  // The rows re-gathered into x_full for dw, db (+)= x^T dy, sum_rows(dy); dx_rows
  // [N / tp, in] = this rank's rows of f-bar's backward (reduce-scatter) of dy w^T, computed
  // into dx_full.
  virtual void column_parallel_backward_sp(LinearShard& layer, const Tensor& x_rows,
                                           Tensor& x_full, const Tensor& dy, Tensor& dx_full,
                                           Tensor& dx_rows, bool accumulate) = 0;
  // y_rows [N / tp, out] = this rank's rows of g-bar(x w) (the partial products in y_full, then
  // reduce-scatter) + b, the bias added once, on the rows.
  virtual void row_parallel_forward_sp(const LinearShard& layer, const Tensor& x,
                                       Tensor& y_full, Tensor& y_rows) = 0;
  // dy_rows: this rank's rows of dL/dy, gathered into dy_full (g-bar's backward); dx [N, in /
  // tp] = dy_full w^T, dw (+)= x^T dy_full, and db = the sum over this rank's rows alone
  // (overwritten, whatever accumulate: a partial sum the caller completes over tp with the
  // other replicated gradients of the rows region).
  virtual void row_parallel_backward_sp(LinearShard& layer, const Tensor& x,
                                        const Tensor& dy_rows, Tensor& dy_full, Tensor& dx,
                                        bool accumulate) = 0;

  // ---- The embedding, the head and the loss.
  virtual void embedding_sum(Tensor& embedded) = 0;
  virtual void loss_max(Tensor& row_max) = 0;
  virtual void loss_sum(Tensor& per_row) = 0;
  virtual void head_backward(Tensor& input_grad) = 0;
  virtual void all_gather_rows(const Tensor& part, Tensor& full, const char* region) = 0;
  virtual void reduce_scatter_rows(const Tensor& full, Tensor& part, const char* region) = 0;
  virtual void sum_replicated_grads(Tensor& grads) = 0;
  // false only to reproduce chapter 6's failure mode: padded vocabulary logits left in the
  // softmax (they must be masked to -inf).
  virtual bool mask_padded_logits() const { return true; }
};

// The vocabulary-parallel head (Megatron-LM's vocab-parallel cross-entropy; docs/REFERENCE.md,
// Tensor parallelism). logits [N, Vs] is this rank's slice of the padded vocabulary, ids
// [vocab_begin, vocab_begin + Vs); its first `valid` columns are real tokens (valid <= 0: none,
// >= Vs: all). The padding columns are set to -inf (unless tp.mask_padded_logits() is false):
// exp(-inf) = 0, so they enter neither the loss nor, through crossentropy_backward, any
// gradient.
void mask_vocab_padding(Tensor& logits, std::int64_t valid, const TensorParallelOps& tp);
// The mean cross-entropy over the N rows without any rank holding a whole row of logits:
// each rank's row maxima, all-reduce MAX; its sums of exponentials rescaled to the global
// maximum and its target logits (0 off the shard), each all-reduce SUM; then lse = max +
// log(sum). stats and lse [N] are left for crossentropy_backward (which needs no
// communication: softmax = exp(logit - lse) on each rank's own columns).
double vocab_parallel_loss(const Tensor& logits, std::span<const std::int32_t> targets,
                           std::int64_t vocab_begin, TensorParallelOps& tp,
                           layers::CrossEntropyStats& stats, Tensor& lse);

}  // namespace mixpar
