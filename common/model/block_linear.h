// What a GPT-2 block asks of each of its four linear layers (y = x w + b, Conv1D layout w
// [in, out]): the forward, and the backward in its two halves, B (the input gradient) and W
// (the weight gradients), which chapter 7's zero-bubble schedule runs apart. A block holds its
// layers (gpt_block.h, BlockLinears), built once when the model is: on one rank a DenseLinear
// (below), with tensor parallelism chapter 6's ColumnParallelLinear and RowParallelLinear
// themselves (ch06_tensor_parallel/column_parallel_linear.h, row_parallel_linear.h), handed
// out by the tp group (tensor_parallel.h). The model never includes a chapter: it knows the
// layers by these interfaces only.
#pragma once

#include <utility>

#include "model/block_gemms.h"
#include "tensor/tensor.h"

namespace mixpar {

// Handles on one linear layer's tensors in the registry: its weight and bias, their
// gradients, and the GEMM seam its products run through (block_gemms.h). With tensor
// parallelism this rank's shards: column-parallel w [in, out / tp], b [out / tp]; row-parallel
// w [in / tp, out] and the whole bias b [out], replicated on every tp rank.
struct LinearParams {
  Tensor w, b;
  Tensor dw, db;
  GemmSite site{};
};

class BlockLinear {
 public:
  virtual ~BlockLinear() = default;
  // Every x, y, dx, dy is 2-D [rows, features]. y = x w + b.
  virtual void forward(const Tensor& x, Tensor& y) const = 0;
  // B: dx = dy w^T (overwritten) ...
  virtual void backward_input(const Tensor& dy, Tensor& dx) const = 0;
  // ... W: dw (+)= x^T dy, db (+)= sum_rows(dy). B then W is the joint backward bit for bit:
  // every product has the same operands.
  virtual void backward_weight(const Tensor& x, const Tensor& dy, bool accumulate) = 0;
  // The weight and bias handles read again, after the registry's parameters were pointed at
  // other storage (ZeRO-3's gathered buffers, GptModel::rebind_params).
  virtual void rebind(const Tensor& w, const Tensor& b) = 0;
};

// A tensor-parallel block's layers add the sequence-parallel forms (Korthikanti et al. 2022,
// section 4.2.2; GptOptions::sequence_parallel): the LayerNorm and residual regions hold this
// rank's N / tp rows, so the side of each layer in that region arrives or leaves as rows, and
// the caller lends the whole [N, features] tensors as scratch.
// A column-parallel layer after the rows region (attn.c_attn, mlp.c_fc): f-bar gathers its
// input's rows.
class TpColumnLinear : public BlockLinear {
 public:
  // y [N, out / tp] = f-bar(x_rows) w + b: x_rows [N / tp, in] gathered into x_full [N, in].
  virtual void forward_sp(const Tensor& x_rows, Tensor& x_full, Tensor& y) const = 0;
  // The rows gathered again into x_full, dw, db (+)= x_full^T dy, sum_rows(dy); dx_full [N, in]
  // = dy w^T, and f-bar's backward leaves this rank's rows of the sum in dx_rows [N / tp, in].
  virtual void backward_sp(const Tensor& x_rows, Tensor& x_full, const Tensor& dy,
                           Tensor& dx_full, Tensor& dx_rows, bool accumulate) = 0;
};
// A row-parallel layer before the rows region (attn.c_proj, mlp.c_proj): g-bar scatters the
// rows of its output's sum.
class TpRowLinear : public BlockLinear {
 public:
  // y_rows [N / tp, out] = this rank's rows of g-bar(x w) (the partial products in y_full
  // [N, out]) + b, the bias added once, on the rows.
  virtual void forward_sp(const Tensor& x, Tensor& y_full, Tensor& y_rows) const = 0;
  // dy_rows [N / tp, out], gathered into dy_full (g-bar's backward); dx [N, in / tp] =
  // dy_full w^T, dw (+)= x^T dy_full. The bias acts on the rows region: db_rows = the sum over
  // this rank's rows alone (overwritten), a partial sum the caller completes over tp with the
  // region's other replicated gradients.
  virtual void backward_sp(const Tensor& x, const Tensor& dy_rows, Tensor& dy_full, Tensor& dx,
                           Tensor& db_rows, bool accumulate) = 0;
};

// One rank's linear layer: the whole weight, no communication, its products through its
// GEMM seam (GemmSite: chapter 3's FP8 GEMMs, or common/ops').
class DenseLinear final : public BlockLinear {
 public:
  explicit DenseLinear(LinearParams p) : p_(std::move(p)) {}
  void forward(const Tensor& x, Tensor& y) const override;
  void backward_input(const Tensor& dy, Tensor& dx) const override;
  void backward_weight(const Tensor& x, const Tensor& dy, bool accumulate) override;
  void rebind(const Tensor& w, const Tensor& b) override;

 private:
  LinearParams p_;
};

}  // namespace mixpar
