// What a GPT-2 block asks of a feed-forward branch run in place of its MLP (c_fc -> GELU ->
// c_proj): the branch's output from ln_2's output, and its backward. Chapter 9's MoE layer is
// one (installed by the trainer, which links the chapter); the model never includes a chapter,
// so it knows the branch by this interface only, as it knows chapter 6's layers by
// BlockLinear (block_linear.h). A block with a branch keeps its attention, LayerNorms and
// residual adds; its own MLP tensors stay in the registry, unused (their gradients zero).
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace mixpar {

class BlockFeedForward {
 public:
  virtual ~BlockFeedForward() = default;
  // y [N, C] (overwritten, the working dtype) = the branch of x [N, C], ln_2's output; the
  // block adds the residual. slot: which micro-batch in flight (the model's slot, gpt.h): a
  // pipeline runs several forwards before their backwards, so the branch keeps each forward's
  // state under its slot until that slot's backward, as the model keeps its activations.
  virtual void forward(const Tensor& x, Tensor& y, int slot) = 0;
  // dx [N, C] (overwritten) = d(branch)/dx of slot's forward given dy [N, C]; the branch's
  // own weight gradients written, or added to when accumulate (micro-batches). The slot's
  // state is freed: the next forward into it is another micro-batch's.
  virtual void backward(const Tensor& dy, Tensor& dx, bool accumulate, int slot) = 0;
};

// Which blocks run a branch, asked once per block when the model is built.
class FeedForwardSeam {
 public:
  virtual ~FeedForwardSeam() = default;
  // The branch of model block `layer`, or null: the block's own MLP. It must outlive the model.
  virtual BlockFeedForward* at(std::int64_t layer) = 0;
};

}  // namespace mixpar
