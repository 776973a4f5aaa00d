// The seam through which a GPT block's causal attention can run somewhere else than
// layers::attention_forward / _backward: context parallelism (chapter 6, part 2), where each
// rank holds T / cp rows of the sequence and the attention over the whole sequence needs the
// other ranks' keys and values. The model stays unaware of how: it hands the seam its rows'
// fused q|k|v, keeps what the seam asks it to keep for backward in place of the [B, H, T, T]
// probabilities, and embeds its rows at the seam's positions (wpe rows) instead of 0..T-1.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace mixpar {

class AttentionSeam {
 public:
  virtual ~AttentionSeam() = default;
  // What forward keeps for backward (an activation), for this rank's B x T rows and `heads`
  // heads of `channels` channels in all.
  virtual Shape saved_shape(std::int64_t B, std::int64_t T, std::int64_t heads,
                            std::int64_t channels) const = 0;
  virtual DType saved_dtype(DType working) const = 0;
  // qkv [B, T, 3 Ch] -> out [B, T, Ch], Ch = heads x head size; saved as saved_shape says.
  virtual void forward(const Tensor& qkv, std::int64_t heads, Tensor& out, Tensor& saved) = 0;
  // dout [B, T, Ch] -> dqkv [B, T, 3 Ch], with qkv, out and saved as forward left them.
  virtual void backward(const Tensor& dout, const Tensor& qkv, const Tensor& out,
                        const Tensor& saved, std::int64_t heads, Tensor& dqkv) = 0;
  // The sequence positions of this rank's T rows, in row order (size T).
  virtual std::vector<std::int64_t> positions(std::int64_t T) const = 0;
};

}  // namespace mixpar
