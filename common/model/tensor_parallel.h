// The collectives a tensor-parallel GptModel calls (Megatron-LM, Shoeybi et al. 2019;
// docs/REFERENCE.md, Tensor parallelism), as an interface: the model names the place in the
// layer it is at, chapter 6 (ch06_tensor_parallel/tp_collectives.h) implements each over the
// grid's tp communicator. The model never includes a chapter; a model with tp = 1 has no
// TensorParallelOps and calls none of them.
//
// Where each is called, in one block (column-parallel c_attn and c_fc, row-parallel
// attn.c_proj and mlp.c_proj):
//   f   before a column-parallel layer: identity forward, all-reduce SUM of the input's
//       gradient backward (f_backward)
//   g   after a row-parallel layer: all-reduce SUM of the partial products forward
//       (g_forward), identity backward
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
// activations. f becomes an all-gather of those rows before each column-parallel layer
// (reduce-scatter of the gradient backward), g a reduce-scatter after each row-parallel layer
// (all-gather of the gradient backward), and the gradients of the parameters those regions
// use (LayerNorms, row-parallel biases) are partial sums over the rows, summed over tp:
//   all_gather_rows      part [N / tp, C] of every rank -> full [N, C], rank r's rows r N / tp..
//   reduce_scatter_rows  full [N, C] partial sums -> this rank's rows of their sum
//   sum_replicated_grads the tp replicas' partial gradients -> their sum (all-reduce SUM)
// region names the place for the traffic record ("block forward", "embedding", ...).
#pragma once

#include "tensor/tensor.h"

namespace mixpar {

class TensorParallelOps {
 public:
  virtual ~TensorParallelOps() = default;
  virtual int rank() const = 0;  // in the tp group
  virtual int size() const = 0;
  virtual void f_backward(Tensor& input_grad) = 0;
  virtual void g_forward(Tensor& output) = 0;
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

}  // namespace mixpar

#include <cstdint>
#include <span>

#include "model/layers.h"

namespace mixpar {

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
