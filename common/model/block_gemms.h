// The seam of a block's GEMMs: the three products of each of a GPT-2 block's four linear
// layers (y = x w + b, dx = dy w^T, dw (+)= x^T dy), replaceable by another arithmetic. A
// GptOptions::gemms implementation (chapter 3's FP8 GEMMs, ch03_master_weights/fp8_linear.h)
// receives them on one rank, or with tensor parallelism on this rank's shard (chapter 6's
// column- and row-parallel layers call it for their local products, GemmSite); null: common/ops'
// FP32-accumulated GEMMs.
// Bias gradients, LayerNorms, attention and the rest of the block stay as they are.
#pragma once

#include <cstdint>

#include "tensor/tensor.h"

namespace mixpar {

class BlockGemms {
 public:
  // The block's linear layers, in forward order.
  enum class Linear : std::uint8_t { kAttn, kAttnProj, kFc, kFcProj };
  static constexpr int kLinears = 4;
  virtual ~BlockGemms() = default;
  // y [N, out] = x [N, in] . w [in, out] + b [out], rounded once into y's dtype; b undefined:
  // no bias (a row-parallel layer's partial product, its bias added after the sum over tp).
  virtual void forward(std::int64_t layer, Linear which, const Tensor& x, const Tensor& w,
                       const Tensor& b, Tensor& y) = 0;
  // dx [N, in] = dy [N, out] . w^T (overwritten).
  virtual void backward_input(std::int64_t layer, Linear which, const Tensor& dy,
                              const Tensor& w, Tensor& dx) = 0;
  // dw [in, out] (+)= x^T . dy.
  virtual void backward_weight(std::int64_t layer, Linear which, const Tensor& x,
                               const Tensor& dy, Tensor& dw, bool accumulate) = 0;
};

// Where a linear layer's products go: the seam and the layer's name in it (null: common/ops').
// Its three calls are the one place that chooses between the seam and common/ops: every linear
// layer a block holds (block_linear.h, chapter 6's column- and row-parallel layers) runs its
// local products through them.
struct GemmSite {
  BlockGemms* gemms = nullptr;
  std::int64_t layer = 0;
  BlockGemms::Linear which = BlockGemms::Linear::kAttn;

  // y = x w (+ b when b is given).
  void forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) const;
  // dx = dy w^T.
  void backward_input(const Tensor& dy, const Tensor& w, Tensor& dx) const;
  // dx = dy w^T when dx is given; dw (+)= x^T dy; db (+)= sum_rows(dy) when db is given (the
  // seam has no bias: common/ops' bias gradient either way).
  void backward(const Tensor& x, const Tensor& w, const Tensor& dy, Tensor* dx, Tensor& dw,
                Tensor* db, bool accumulate) const;
};

}  // namespace mixpar
