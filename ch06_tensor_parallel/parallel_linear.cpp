// Column- and row-parallel linear layers: this rank's local products through the layer's GEMM
// site (model/block_gemms.h: the seam, --dtype fp8's FP8 GEMMs, or common/ops') with f and g
// around them (f-bar and g-bar with sequence parallelism), the operators as TpCollectives runs
// them over the tp group (conjugate_ops.h, counted by region).
#include <stdexcept>
#include <string>
#include <utility>

#include "ch06_tensor_parallel/column_parallel_linear.h"
#include "ch06_tensor_parallel/conjugate_ops.h"
#include "ch06_tensor_parallel/row_parallel_linear.h"
#include "ch06_tensor_parallel/tp_collectives.h"
#include "ops/linear.h"

namespace mixpar::ch06 {

ColumnParallelLinear::ColumnParallelLinear(TpCollectives& tp, Tensor weight, Tensor bias,
                                           Tensor weight_grad, Tensor bias_grad,
                                           GemmSite gemm_site)
    : w(std::move(weight)), b(std::move(bias)), dw(std::move(weight_grad)),
      db(std::move(bias_grad)), site(gemm_site), tp_(&tp) {}

void ColumnParallelLinear::forward(const Tensor& x, Tensor& y) const {
  site.forward(f_forward(x), w, &b, y);
}

void ColumnParallelLinear::backward(const Tensor& x, const Tensor& dy, Tensor* dx,
                                    bool accumulate) {
  if (dx != nullptr) backward_input(dy, *dx);
  backward_weight(x, dy, accumulate);
}

void ColumnParallelLinear::backward_input(const Tensor& dy, Tensor& dx) const {
  site.backward_input(dy, w, dx);  // this rank's share: its columns' dy times their w^T
  tp_->f_backward(dx);             // the shares summed
}

void ColumnParallelLinear::backward_weight(const Tensor& x, const Tensor& dy, bool accumulate) {
  site.backward(x, w, dy, nullptr, dw, &db, accumulate);  // dx: backward_input's
}

void ColumnParallelLinear::forward_sp(const Tensor& x_rows, Tensor& x_full, Tensor& y) const {
  tp_->f_bar_forward(x_rows, x_full);
  site.forward(x_full, w, &b, y);
}

void ColumnParallelLinear::backward_sp(const Tensor& x_rows, Tensor& x_full, const Tensor& dy,
                                       Tensor& dx_full, Tensor& dx_rows, bool accumulate) {
  tp_->f_bar_forward(x_rows, x_full, "block backward re-gather");
  site.backward(x_full, w, dy, &dx_full, dw, &db, accumulate);
  tp_->f_bar_backward(dx_full, dx_rows);
}

void ColumnParallelLinear::rebind(const Tensor& new_w, const Tensor& new_b) {
  w = new_w;
  b = new_b;
}

RowParallelLinear::RowParallelLinear(TpCollectives& tp, Tensor weight, Tensor bias,
                                     Tensor weight_grad, Tensor bias_grad, GemmSite gemm_site)
    : w(std::move(weight)), b(std::move(bias)), dw(std::move(weight_grad)),
      db(std::move(bias_grad)), site(gemm_site), tp_(&tp) {}

void RowParallelLinear::forward(const Tensor& x_r, Tensor& y) const {
  site.forward(x_r, w, nullptr, y);
  tp_->g_forward(y);
  ops::bias_add(y, b);  // once, after the reduction
}

void RowParallelLinear::backward(const Tensor& x_r, const Tensor& dy, Tensor* dx_r,
                                 bool accumulate) {
  if (dx_r != nullptr) backward_input(dy, *dx_r);
  backward_weight(x_r, dy, accumulate);
}

void RowParallelLinear::backward_input(const Tensor& dy, Tensor& dx_r) const {
  site.backward_input(g_backward(dy), w, dx_r);
}

void RowParallelLinear::backward_weight(const Tensor& x_r, const Tensor& dy, bool accumulate) {
  site.backward(x_r, w, g_backward(dy), nullptr, dw, &db, accumulate);
}

void RowParallelLinear::forward_sp(const Tensor& x_r, Tensor& y_full, Tensor& y_rows) const {
  site.forward(x_r, w, nullptr, y_full);
  tp_->g_bar_forward(y_full, y_rows);
  ops::bias_add(y_rows, b);  // once, on this rank's rows of the sum
}

void RowParallelLinear::backward_sp(const Tensor& x_r, const Tensor& dy_rows, Tensor& dy_full,
                                    Tensor& dx_r, Tensor& db_rows, bool accumulate) {
  ops::bias_grad(dy_rows, db_rows);  // this rank's rows' share of the bias gradient
  tp_->g_bar_backward(dy_rows, dy_full);
  site.backward(x_r, w, dy_full, &dx_r, dw, nullptr, accumulate);
}

void RowParallelLinear::rebind(const Tensor& new_w, const Tensor& new_b) {
  w = new_w;
  b = new_b;
}

Tensor column_block(const Tensor& full, int rank, int size) {
  const std::int64_t cols = full.dim(full.ndim() - 1);
  if (size < 1 || cols % size != 0) {
    throw std::invalid_argument("column_block: " + std::to_string(cols) +
                                " columns do not split into " + std::to_string(size));
  }
  const std::int64_t rows = full.numel() / cols, part = cols / size;
  Shape shape = full.shape();
  shape.back() = part;
  Tensor out = Tensor::empty(shape, full.dtype(), full.category());
  for (std::int64_t r = 0; r < rows; ++r) {
    Tensor dst = out.flat_slice(r * part, part);
    dst.copy_from(full.flat_slice(r * cols + rank * part, part));
  }
  return out;
}

Tensor row_block(const Tensor& full, int rank, int size) {
  const std::int64_t rows = full.dim(0);
  if (size < 1 || rows % size != 0) {
    throw std::invalid_argument("row_block: " + std::to_string(rows) +
                                " rows do not split into " + std::to_string(size));
  }
  const std::int64_t per = full.numel() / size;
  Shape shape = full.shape();
  shape.front() = rows / size;
  Tensor out = Tensor::empty(shape, full.dtype(), full.category());
  out.copy_from(full.flat_slice(rank * per, per));
  return out;
}

}  // namespace mixpar::ch06
