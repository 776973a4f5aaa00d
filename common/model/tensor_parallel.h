// What a tensor-parallel GptModel asks of its tp group (Megatron-LM, Shoeybi et al. 2019;
// docs/REFERENCE.md, Tensor parallelism and activation memory), as an interface: chapter 6
// (ch06_tensor_parallel/tp_collectives.h) implements it over the grid's tp communicator. The
// model never includes a chapter; a model with tp = 1 has no group and calls none of it.
//
// The group hands out the block's four linear layers, built once per block and held by it
// (gpt_block.h, BlockLinears): chapter 6's own ColumnParallelLinear (attn.c_attn, mlp.c_fc: f
// before it, identity forward, all-reduce SUM of the input's gradient backward) and
// RowParallelLinear (attn.c_proj, mlp.c_proj: g after it, all-reduce SUM of the partial
// products forward, identity backward; the whole bias added once, after g), bound to the
// group, which runs their f and g. What the model calls on the group itself is the rest:
//   embedding_sum   the partial embeddings (off-shard tokens give zero rows): all-reduce SUM
//   loss_max        each row's local maximum logit: all-reduce MAX
//   loss_sum        each row's target logit, then its sum of exponentials: all-reduce SUM
//   head_backward   the LM head's input gradient (the head is column-parallel over the
//                   vocabulary: its f): all-reduce SUM
// Every call is collective over the tp group, in the same order on every rank.
//
// Sequence parallel (Korthikanti et al. 2022, section 4.2.2; GptOptions::sequence_parallel):
// the LayerNorm and residual regions hold this rank's N / tp rows of the [N = B T, C]
// activations; the layers' f and g become f-bar and g-bar (block_linear.h, TpColumnLinear and
// TpRowLinear). The gradients of the parameters those regions use (LayerNorms, row-parallel
// biases) are partial sums over the rows, summed over tp; the embedding and the head move rows
// themselves:
//   all_gather_rows      part [N / tp, C] of every rank -> full [N, C], rank r's rows r N / tp..
//   reduce_scatter_rows  full [N, C] partial sums -> this rank's rows of their sum
//   sum_replicated_grads the tp replicas' partial gradients -> their sum (all-reduce SUM)
// region names the place for the traffic record ("embedding", "head forward", ...).
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include "model/block_linear.h"
#include "model/layers.h"
#include "tensor/tensor.h"

namespace mixpar {

class TensorParallelGroup {
 public:
  virtual ~TensorParallelGroup() = default;
  virtual int rank() const = 0;  // in the tp group
  virtual int size() const = 0;

  // ---- The block's split linear layers on this rank's shards (handles: the layer reads and
  // writes the registry's tensors), bound to this group, which must outlive them.
  virtual std::unique_ptr<TpColumnLinear> column_parallel(const LinearParams& shard) = 0;
  virtual std::unique_ptr<TpRowLinear> row_parallel(const LinearParams& shard) = 0;

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
void mask_vocab_padding(Tensor& logits, std::int64_t valid, const TensorParallelGroup& tp);
// The mean cross-entropy over the N rows without any rank holding a whole row of logits:
// each rank's row maxima, all-reduce MAX; its sums of exponentials rescaled to the global
// maximum and its target logits (0 off the shard), each all-reduce SUM; then lse = max +
// log(sum). stats and lse [N] are left for crossentropy_backward (which needs no
// communication: softmax = exp(logit - lse) on each rank's own columns).
double vocab_parallel_loss(const Tensor& logits, std::span<const std::int32_t> targets,
                           std::int64_t vocab_begin, TensorParallelGroup& tp,
                           layers::CrossEntropyStats& stats, Tensor& lse);

}  // namespace mixpar
